"""hybridrl.train's config: a dict (dotted or nested), a YAML file or an RLConfig give one config, checked as the
CLI checks it; data= and the config's files do not both name the data."""

from __future__ import annotations

import pytest

from hybridrl.api.train import _write_data, config_source, train
from hybridrl.cli import main
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import load_rl_config
from hybridrl.errors import ConfigError

KEYS = {"algorithm.adv_estimator": "rloo", "data.train_batch_size": 4, "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4, "trainer.experiment_name": "api"}


def loaded(config) -> RLConfig:
    file, values = config_source(config)
    return load_rl_config(file, (), values)[0]


def test_a_dotted_dict_a_nested_dict_a_yaml_file_and_an_rlconfig_give_one_config(tmp_path):
    nested = {"algorithm": {"adv_estimator": "rloo"}, "data": {"train_batch_size": 4},
              "actor_rollout_ref": {"rollout": {"n": 2}, "actor": {"ppo_mini_batch_size": 4}},
              "trainer": {"experiment_name": "api"}}
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("".join(f"{k}: {v}\n" for k, v in KEYS.items()))
    from_cli = load_rl_config(None, [f"{k}={v}" for k, v in KEYS.items()])[0]
    typed = load_config(RLConfig, None, [f"{k}={v}" for k, v in KEYS.items()])
    for config in (KEYS, nested, str(yaml_file), yaml_file, typed):
        assert loaded(config) == from_cli
    assert from_cli.trainer.default_local_dir == "checkpoints/hybridrl/api"  # ${...} resolved after the layers
    assert loaded(None) == load_rl_config(None, [])[0]


def test_a_bad_key_gets_the_cli_error_text(capsys):
    main(["train", "data.train_batch_siz=4"])
    cli_line = capsys.readouterr().err.strip()
    with pytest.raises(ConfigError) as e:
        loaded({"data.train_batch_siz": 4})
    assert cli_line.startswith("hybridrl train: error: command line: unknown key 'data.train_batch_siz'; did you mean")
    assert cli_line.removeprefix("hybridrl train: error: command line: ") == str(e.value).removeprefix("config: ")


def test_every_problem_is_reported_at_once_as_the_cli_does():
    with pytest.raises(ConfigError) as e:
        loaded({"data.train_batch_size": 0, "algorithm.adv_estimator": "nope"})
    assert str(e.value).startswith("2 problems in the config:")


def test_a_value_no_key_can_hold_and_an_unknown_kind_of_config_are_named():
    with pytest.raises(ConfigError, match="config: a int; give a dict of config keys, a YAML file path or an RLConfig"):
        config_source(3)
    with pytest.raises(ConfigError, match=r"^config: "):
        loaded({"trainer.experiment_name": object()})


def test_data_and_the_configs_train_files_do_not_both_name_the_data(tmp_path):
    cfg = RLConfig()
    cfg.data.train_files = ["mine.parquet"]
    cfg.trainer.default_local_dir = str(tmp_path)
    with pytest.raises(ConfigError, match=r"data.train_files=\['mine.parquet'\] is set and data= is given; give one"):
        _write_data(cfg, {}, [{"prompt": "q"}], None, True)


def test_data_alone_turns_off_the_default_arithmetic_validation(tmp_path):
    cfg = RLConfig()
    cfg.trainer.default_local_dir = str(tmp_path)
    written, values = _write_data(cfg, {}, [{"prompt": "q"}], None, True)
    assert values == {"data.train_files": [written.path], "data.val_files": []}
    assert written.path.startswith(str(tmp_path / "data" / "train-")) and written.text_prompts


def test_a_reward_and_a_custom_reward_file_do_not_both_score(tmp_path):
    reward_file = tmp_path / "r.py"
    reward_file.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    with pytest.raises(ConfigError, match="reward= and custom_reward_function.path=.* both name the reward function"):
        train({"custom_reward_function.path": str(reward_file), "trainer.default_local_dir": str(tmp_path)},
              reward=lambda completions, **kw: [0.0] * len(completions))
    assert not (tmp_path / "config.yaml").exists()  # refused before the run started
