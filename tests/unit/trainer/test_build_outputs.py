"""build_run checks every folder the run writes into before it loads a model (hybridrl/paths.py)."""

from __future__ import annotations

import json
import os
import re

import pytest

import hybridrl.trainer.build as build
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.errors import ConfigError


@pytest.mark.parametrize("key, save_freq", [("default_local_dir", 0), ("default_local_dir", -1),
                                            ("rollout_data_dir", 0), ("validation_data_dir", 0)])
def test_a_run_folder_under_a_file_fails_before_anything_loads(tmp_path, monkeypatch, key, save_freq):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cfg = load_config(RLConfig, None, [f"trainer.default_local_dir={tmp_path / 'run'}", f"trainer.save_freq={save_freq}",
                                       f"trainer.{key}={blocker / 'sub'}"])
    run_plan = resolve(cfg)
    monkeypatch.setattr(build, "load_tokenizer", lambda *a: pytest.fail("loaded before the folders were checked"))
    with pytest.raises(ConfigError, match=f"^{re.escape(f'trainer.{key}=')}.*{re.escape(f': {blocker} is a file, not a folder')}"):
        build.build_run(run_plan, log=lambda *_: None)


def damaged_checkpoints(root, steps=(2, 4)) -> None:
    """Whole checkpoints (manifest and all), each then cut short as a full disk or a bad copy would."""
    from hybridrl.trainer.checkpoint import write_step_folder

    def write(tmp):
        with open(os.path.join(tmp, "actor_state.pt"), "wb") as f:
            f.write(b"s" * 4096)

    for step in steps:
        with open(write_step_folder(str(root), step, write) + "/actor_state.pt", "r+b") as f:
            f.truncate(100)


def tree(root) -> dict[str, tuple[int, int]]:
    """The folder and everything in it, with sizes and modification times: equal trees, nothing written."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [root, *sorted(root.rglob("*"))]}


def test_every_checkpoint_damaged_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    run = tmp_path / "run"
    damaged_checkpoints(run)
    before, lines = tree(run), []
    cfg = load_config(RLConfig, None, [f"trainer.default_local_dir={run}", "trainer.save_freq=1"])
    monkeypatch.setattr(build, "load_tokenizer", lambda *a: pytest.fail("loaded before the resume was decided"))
    with pytest.raises(ConfigError, match=r"^trainer\.resume_mode=auto: every checkpoint in .*/run is damaged "
                                          r"\(global_step_4: actor_state\.pt has 100 bytes, the manifest says 4096; "
                                          r"global_step_2: actor_state\.pt has 100 bytes.*\); nothing was written\."):
        build.build_run(resolve(cfg), log=lines.append)
    assert tree(run) == before  # no lock file, no write probe, no config.yaml
    assert not any("skipping" in line for line in lines)


def intact_checkpoint(root, step: int, cfg) -> None:
    """What resume_point reads of a checkpoint: its trainer state and the config that wrote it."""
    from omegaconf import OmegaConf

    from hybridrl.trainer.checkpoint import write_step_folder

    def write(tmp):
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, "sampler": {"epoch": 0, "position": 8 * step}}, f)
        OmegaConf.save(OmegaConf.structured(cfg), os.path.join(tmp, "config.yaml"))

    write_step_folder(str(root), step, write)


def test_the_resume_is_decided_again_when_a_run_ending_meanwhile_saved(tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = load_config(RLConfig, None, [f"trainer.default_local_dir={run}"])
    run_plan = resolve(cfg)  # it fills in derived values: the saved config is the resolved one
    intact_checkpoint(run, 2, cfg)
    real_lock, chosen = build.RunLock, []

    def lock_after_another_run_saved(*a, **k):  # a run on this folder ending between the decision and the lock
        intact_checkpoint(run, 4, cfg)
        return real_lock(*a, **k)

    def built(cfg, plan, resume, log, function=None, agent=None):
        chosen.append(resume.step)
        raise KeyboardInterrupt  # stop before loading models

    monkeypatch.setattr(build, "RunLock", lock_after_another_run_saved)
    monkeypatch.setattr(build, "_build_run", built)
    with pytest.raises(KeyboardInterrupt):
        build.build_run(run_plan, log=lambda *_: None)
    assert chosen == [4]  # not step 2, which the run would have saved over step 4's successors
