"""The `hybridrl rm` config: sft's key names, verl-style errors naming the key and the fix, and the CLI's
one-line errors."""

from __future__ import annotations

import pytest

from hybridrl.cli import main
from hybridrl.config.loader import load_config
from hybridrl.config.rm import RMConfig, validate_rm_config
from hybridrl.errors import ConfigError


def test_defaults_validate_and_derive_the_micro_batch():
    cfg = load_config(RMConfig, None, ["data.train_batch_size=96"])
    notes = validate_rm_config(cfg)
    assert cfg.data.micro_batch_size_per_gpu == 48 and "derived" in notes[0]


@pytest.mark.parametrize("overrides, message", [
    (["data.chosen=x"], "unknown key 'data.chosen'; did you mean 'data.chosen_key'?"),
    (["loss.center_rewards_coefficient=-1"], "loss.center_rewards_coefficient"),
    (["trainer.resume_mode=sometimes"], "trainer.resume_mode"),
])
def test_bad_keys_and_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(RMConfig, None, overrides)


@pytest.mark.parametrize("overrides, message", [
    (["data.train_batch_size=8", "data.micro_batch_size_per_gpu=3"], "must divide data.train_batch_size=8; use one of 1, 2, 4, 8"),
    (["data.rejected_key=chosen"], "must name three different columns"),
    (["trainer.resume_mode=resume_path"], "needs trainer.resume_from_path"),
])
def test_cross_key_rules(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_rm_config(load_config(RMConfig, None, overrides))


def test_cli_prints_one_line_for_a_missing_file(capsys, tmp_path, random_model_dir):
    code = main(["rm", f"model.partial_pretrain={random_model_dir}", f"data.train_files=[{tmp_path}/none.parquet]",
                 f"trainer.default_local_dir={tmp_path}/out"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("hybridrl rm: error: data.train_files: file not found:")


def test_cli_help_lists_the_rm_keys(capsys):
    with pytest.raises(SystemExit):
        main(["rm", "--help"])
    out = capsys.readouterr().out
    assert "data.chosen_key" in out and "loss.center_rewards_coefficient" in out and "reward_model.model.path" in out
