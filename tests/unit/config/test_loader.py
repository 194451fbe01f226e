"""load_config: defaults < YAML file < dotted overrides, with one-line ConfigErrors."""

from __future__ import annotations

import re

import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig
from hybridrl.errors import ConfigError


def write(tmp_path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- values -----------------------------------------------------------------------------


def test_defaults_load_without_file_or_overrides():
    cfg = load_config(RLConfig, None, [])
    assert isinstance(cfg, RLConfig)
    assert cfg.data.train_batch_size == 32
    assert cfg.data.train_files == ["data/arithmetic/train.parquet"]
    assert cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False
    assert cfg.trainer.total_training_steps == 200
    assert cfg.trainer.logger == ["console", "file"]


def test_int_override_is_converted_to_int():
    cfg = load_config(RLConfig, None, ["data.train_batch_size=32"])
    assert cfg.data.train_batch_size == 32
    assert type(cfg.data.train_batch_size) is int


def test_bool_override_is_converted_to_bool():
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.actor.use_kl_loss=true"])
    assert cfg.actor_rollout_ref.actor.use_kl_loss is True


def test_null_override_of_optional_key_gives_none():
    cfg = load_config(RLConfig, None, ["trainer.total_training_steps=null"])
    assert cfg.trainer.total_training_steps is None


def test_int_literal_for_float_key_becomes_float():
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.actor.clip_ratio=1"])
    assert cfg.actor_rollout_ref.actor.clip_ratio == 1.0
    assert type(cfg.actor_rollout_ref.actor.clip_ratio) is float


def test_deeply_nested_override():
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.rollout.val_kwargs.top_k=5",
                                       "actor_rollout_ref.actor.optim.lr=0.5"])
    assert cfg.actor_rollout_ref.rollout.val_kwargs.top_k == 5
    assert cfg.actor_rollout_ref.actor.optim.lr == 0.5


def test_later_override_wins_over_earlier():
    cfg = load_config(RLConfig, None, ["data.train_batch_size=32", "data.train_batch_size=8"])
    assert cfg.data.train_batch_size == 8


def test_yaml_values_apply(tmp_path):
    path = write(tmp_path, "data:\n  train_batch_size: 8\n  max_response_length: 12\n"
                           "actor_rollout_ref:\n  rollout:\n    n: 4\n")
    cfg = load_config(RLConfig, path, [])
    assert cfg.data.train_batch_size == 8
    assert cfg.data.max_response_length == 12
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.data.max_prompt_length == 64  # untouched default


def test_command_line_override_wins_over_yaml(tmp_path):
    path = write(tmp_path, "data:\n  train_batch_size: 8\n  max_response_length: 12\n")
    cfg = load_config(RLConfig, path, ["data.train_batch_size=4"])
    assert cfg.data.train_batch_size == 4
    assert cfg.data.max_response_length == 12  # from the YAML, not overridden


def test_empty_yaml_file_gives_defaults(tmp_path):
    cfg = load_config(RLConfig, write(tmp_path, ""), [])
    assert cfg == load_config(RLConfig, None, [])


def test_default_local_dir_interpolation_is_resolved():
    cfg = load_config(RLConfig, None, ["trainer.experiment_name=exp1"])
    assert cfg.trainer.default_local_dir == "checkpoints/hybridrl/exp1"


def test_scalar_for_list_key_on_command_line_is_wrapped():
    cfg = load_config(RLConfig, None, ["data.train_files=x.parquet"])
    assert cfg.data.train_files == ["x.parquet"]


def test_scalar_for_list_key_in_yaml_is_wrapped(tmp_path):
    cfg = load_config(RLConfig, write(tmp_path, "data:\n  train_files: y.parquet\n"), [])
    assert cfg.data.train_files == ["y.parquet"]


def test_list_value_on_command_line():
    cfg = load_config(RLConfig, None, ["data.train_files=[a.parquet,b.parquet]", "trainer.logger=console"])
    assert cfg.data.train_files == ["a.parquet", "b.parquet"]
    assert cfg.trainer.logger == ["console"]


def test_sft_config_with_override():
    cfg = load_config(SFTConfig, None, ["optim.lr=0.01"])
    assert isinstance(cfg, SFTConfig)
    assert cfg.optim.lr == 0.01
    assert cfg.optim.lr_scheduler == "cosine"  # default untouched
    assert cfg.data.train_batch_size == 64


# --- errors: one test per message ------------------------------------------------------


def test_unknown_key_suggests_closest_key():
    with pytest.raises(ConfigError, match=r"command line: unknown key 'data\.train_batch_sise'; "
                                          r"did you mean 'data\.train_batch_size'\?"):
        load_config(RLConfig, None, ["data.train_batch_sise=3"])


def test_right_leaf_under_wrong_group_suggests_full_key():
    with pytest.raises(ConfigError, match=r"unknown key 'actor\.use_kl_loss'; "
                                          r"did you mean 'actor_rollout_ref\.actor\.use_kl_loss'\?"):
        load_config(RLConfig, None, ["actor.use_kl_loss=true"])


def test_group_given_a_value():
    with pytest.raises(ConfigError, match=r"command line: 'data' is a group of keys, not a value; "
                                          r"set e\.g\. data\.train_files=\.\.\."):
        load_config(RLConfig, None, ["data=3"])


def test_nested_group_given_a_value():
    with pytest.raises(ConfigError, match=r"'actor_rollout_ref\.actor' is a group of keys, not a value; "
                                          r"set e\.g\. actor_rollout_ref\.actor\.ppo_mini_batch_size="):
        load_config(RLConfig, None, ["actor_rollout_ref.actor=3"])


@pytest.mark.parametrize("item", ["data.train_batch_size", "=3", "--data.train_batch_size=3"])
def test_override_without_key_value_form(item):
    with pytest.raises(ConfigError, match=re.escape(f"override {item!r} must look like key=value "
                                                    "(for example data.train_batch_size=32)")):
        load_config(RLConfig, None, [item])


def test_wrong_type_for_integer_key():
    with pytest.raises(ConfigError, match=r"^command line: data\.train_batch_size='abc' is not valid: expected an integer$"):
        load_config(RLConfig, None, ["data.train_batch_size=abc"])


def test_float_for_integer_key():
    with pytest.raises(ConfigError, match=r"^command line: data\.train_batch_size=1\.5 is not valid: expected an integer$"):
        load_config(RLConfig, None, ["data.train_batch_size=1.5"])


def test_wrong_type_for_bool_key():
    with pytest.raises(ConfigError, match=r"^command line: actor_rollout_ref\.actor\.use_kl_loss='maybe' is not valid: "
                                          r"expected true or false$"):
        load_config(RLConfig, None, ["actor_rollout_ref.actor.use_kl_loss=maybe"])


def test_wrong_type_for_float_key():
    with pytest.raises(ConfigError, match=r"^command line: actor_rollout_ref\.actor\.clip_ratio='abc' is not valid: "
                                          r"expected a number$"):
        load_config(RLConfig, None, ["actor_rollout_ref.actor.clip_ratio=abc"])


def test_wrong_type_for_optional_int_key():
    with pytest.raises(ConfigError, match=r"^command line: trainer\.total_training_steps='abc' is not valid: "
                                          r"expected an integer or null$"):
        load_config(RLConfig, None, ["trainer.total_training_steps=abc"])


def test_wrong_list_element_type_names_key_and_element():
    with pytest.raises(ConfigError, match=r"^command line: actor_rollout_ref\.actor\.optim\.betas='b' is not valid: "
                                          r"expected a list of numbers$"):
        load_config(RLConfig, None, ["actor_rollout_ref.actor.optim.betas=[0.9,b]"])


def test_missing_config_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"--config {path}: no such file")):
        load_config(RLConfig, path, [])


def test_yaml_top_level_list_is_rejected(tmp_path):
    path = write(tmp_path, "- 1\n- 2\n")
    with pytest.raises(ConfigError, match=re.escape(f"--config {path}: expected a mapping of keys at the top level")):
        load_config(RLConfig, path, [])


def test_invalid_yaml_syntax(tmp_path):
    path = write(tmp_path, "data: [1, 2\n")
    with pytest.raises(ConfigError, match=re.escape(f"--config {path}: not valid YAML (")):
        load_config(RLConfig, path, [])


def test_unknown_key_in_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "data:\n  train_batch_sise: 8\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: unknown key 'data.train_batch_sise'; "
                                                    "did you mean 'data.train_batch_size'?")):
        load_config(RLConfig, path, [])


def test_group_given_a_value_in_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "data: 3\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: 'data' is a group of keys, not a value")):
        load_config(RLConfig, path, [])


def test_unknown_key_in_sft_config_suggests_sft_key():
    with pytest.raises(ConfigError, match=r"unknown key 'optim\.lr_schedulr'; did you mean 'optim\.lr_scheduler'\?"):
        load_config(SFTConfig, None, ["optim.lr_schedulr=constant"])


def test_malformed_list_override_is_a_config_error():
    with pytest.raises(ConfigError, match=r"cannot parse overrides"):
        load_config(RLConfig, None, ["data.train_files=[a, b"])


def test_dotted_keys_in_yaml_are_expanded(tmp_path):
    path = tmp_path / "dotted.yaml"
    path.write_text("data.train_batch_size: 8\nactor_rollout_ref.actor.optim.lr: 0.5\n")
    cfg = load_config(RLConfig, str(path))
    assert cfg.data.train_batch_size == 8 and cfg.actor_rollout_ref.actor.optim.lr == 0.5


@pytest.mark.parametrize("text,kind", [("just a string\n", "str"), ("42\n", "int"), ("- a\n- b\n", "list")])
def test_yaml_that_is_not_a_mapping(tmp_path, text, kind):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"expected a mapping of keys at the top level, got {kind}$"):
        load_config(RLConfig, str(path))


def test_wrong_type_in_yaml_names_the_file(tmp_path):
    path = tmp_path / "typed.yaml"
    path.write_text("data:\n  train_batch_size: abc\n")
    with pytest.raises(ConfigError, match=r"^--config .*typed.yaml: data\.train_batch_size='abc' is not valid"):
        load_config(RLConfig, str(path))


def test_unknown_key_with_nothing_similar_suggests_nothing():
    with pytest.raises(ConfigError, match=r"unknown key 'zzz'; no similar key exists"):
        load_config(RLConfig, None, ["zzz=1"])


def test_empty_value_says_so():
    with pytest.raises(ConfigError, match=r"data\.train_batch_size is empty or null: expected an integer"):
        load_config(RLConfig, None, ["data.train_batch_size="])
