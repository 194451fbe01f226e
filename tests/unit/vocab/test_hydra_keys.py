"""Hydra's own keys in a config (vocab/hydra_keys.py): a `defaults:` list and a `hydra:` section are
refused saying what to do instead, not "no similar key exists"."""

from __future__ import annotations

import pytest

from hybridrl.vocab.hydra_keys import composed_files
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig
from hybridrl.errors import ConfigError

VERL_DEFAULTS = """defaults:
  - actor@actor_rollout_ref.actor: dp_actor
  - data@data: legacy_data
  - ref@actor_rollout_ref.ref: dp_ref
  - rollout@actor_rollout_ref.rollout: rollout
  - critic@critic: dp_critic
  - override hydra/job_logging: disabled
  - _self_
data:
  train_batch_size: 8
"""


def problem(tmp_path, text: str, cls=RLConfig) -> str:
    path = tmp_path / "verl.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(cls, str(path))
    return str(e.value)


def test_a_defaults_list_is_refused_naming_the_files_to_copy_from(tmp_path):
    message = problem(tmp_path, VERL_DEFAULTS)
    assert message == (
        f"--config {tmp_path / 'verl.yaml'}: defaults: Hydra `defaults` lists are not supported: hybridrl's config "
        "is one YAML file over its built-in defaults, plus key=value overrides; remove the defaults list and copy "
        "the keys you need from the files it names (actor/dp_actor.yaml, data/legacy_data.yaml, ref/dp_ref.yaml, "
        "rollout/rollout.yaml and 1 more) into your --config file or overrides (`--help` lists every key)")


def test_a_defaults_list_of_one_file_on_the_command_line():
    with pytest.raises(ConfigError, match=r"^command line: defaults: Hydra `defaults` lists are not supported: .*"
                                          r"the files it names \(ppo_trainer\.yaml\)"):
        load_config(RLConfig, None, ["defaults=[ppo_trainer,_self_]"])


@pytest.mark.parametrize("text", ["defaults:\n  - _self_\n", "defaults: []\n"])
def test_a_defaults_list_composing_nothing_else_is_accepted(tmp_path, text):
    path = tmp_path / "self.yaml"
    path.write_text(text + "data:\n  train_batch_size: 8\n")
    assert load_config(RLConfig, str(path)).data.train_batch_size == 8


def test_the_hydra_section_is_refused_once_naming_its_keys(tmp_path):
    message = problem(tmp_path, "hydra:\n  run:\n    dir: out\n  searchpath:\n    - file://verl/trainer/config\n")
    assert message == (f"--config {tmp_path / 'verl.yaml'}: hydra.run.dir, hydra.searchpath: the `hydra:` section "
                       "configures Hydra itself (output folder, logging, config search path), and hybridrl does not "
                       "run under Hydra; remove it (a run writes to trainer.default_local_dir)")


def test_a_hydra_override_on_the_command_line():
    with pytest.raises(ConfigError, match=r"^command line: hydra\.run\.dir: the `hydra:` section configures Hydra"):
        load_config(RLConfig, None, ["hydra.run.dir=out"])


def test_an_sft_config_answers_hydra_keys_too(tmp_path):
    assert "Hydra `defaults` lists are not supported" in problem(tmp_path, "defaults:\n  - sft_trainer\n", SFTConfig)


def test_hydras_target_is_still_accepted(tmp_path):  # verl's sections name their classes; nothing reads them here
    path = tmp_path / "t.yaml"
    path.write_text("_target_: verl.Config\nactor_rollout_ref:\n  actor:\n    _target_: verl.ActorConfig\n")
    load_config(RLConfig, str(path))


@pytest.mark.parametrize("value,files", [
    ("ppo_trainer", ["ppo_trainer.yaml"]),
    ([{"override actor@actor_rollout_ref.actor": "megatron_actor"}], ["actor/megatron_actor.yaml"]),
    ([{"model": None}, "_self_", {"override hydra/job_logging": "disabled"}], []),  # Hydra's own: no run keys
])
def test_composed_files(value, files):
    assert composed_files(value) == files
