"""build_run checks every folder the run writes into before it loads a model (hybridrl/paths.py)."""

from __future__ import annotations

import re

import pytest

import hybridrl.trainer.build as build
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import validate_rl_config
from hybridrl.errors import ConfigError


@pytest.mark.parametrize("key, save_freq", [("default_local_dir", 0), ("default_local_dir", -1),
                                            ("rollout_data_dir", 0), ("validation_data_dir", 0)])
def test_a_run_folder_under_a_file_fails_before_anything_loads(tmp_path, monkeypatch, key, save_freq):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cfg = load_config(RLConfig, None, [f"trainer.default_local_dir={tmp_path / 'run'}", f"trainer.save_freq={save_freq}",
                                       f"trainer.{key}={blocker / 'sub'}"])
    plan = validate_rl_config(cfg)
    monkeypatch.setattr(build, "load_tokenizer", lambda *a: pytest.fail("loaded before the folders were checked"))
    with pytest.raises(ConfigError, match=f"^{re.escape(f'trainer.{key}=')}.*{re.escape(f': {blocker} is a file, not a folder')}"):
        build.build_run(cfg, plan, log=lambda *_: None)
