"""Checkpoint pieces without training: manifests, config comparison, RNG round trip, save schedule,
metrics file on resume."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.trainer import checkpoint
from hybridrl.trainer.build import Checkpointing
from hybridrl.trainer.tracking import Tracker


def make_folder(tmp_path, step=3):
    folder = tmp_path / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model.safetensors").write_bytes(b"x" * 100)
    (folder / "trainer_state.json").write_text(json.dumps({"step": step, "sampler": {"epoch": 1, "position": 16}}))
    checkpoint._write_manifest(str(folder), step)
    return folder


def test_manifest_vouches_for_every_file(tmp_path):
    folder = make_folder(tmp_path)
    assert checkpoint.problem_of(str(folder)) is None
    state = (folder / "trainer_state.json").read_bytes()
    assert json.loads((folder / "checkpoint.json").read_text())["files"] == {  # format 2: sizes and SHA-256
        "actor/model.safetensors": {"size": 100, "sha256": hashlib.sha256(b"x" * 100).hexdigest()},
        "trainer_state.json": {"size": len(state), "sha256": hashlib.sha256(state).hexdigest()}}
    (folder / "actor" / "model.safetensors").write_bytes(b"x" * 99)
    assert checkpoint.problem_of(str(folder)) == "actor/model.safetensors has 99 bytes, the manifest says 100"
    (folder / "actor" / "model.safetensors").unlink()
    assert checkpoint.problem_of(str(folder)) == "actor/model.safetensors is missing"
    (folder / "checkpoint.json").unlink()
    assert checkpoint.problem_of(str(folder)) == "no checkpoint.json (the save did not finish)"


def test_latest_complete_skips_partial_and_temporary_folders(tmp_path):
    make_folder(tmp_path, 3)
    broken = make_folder(tmp_path, 9)
    (broken / "checkpoint.json").unlink()
    (tmp_path / ".tmp_global_step_12_999").mkdir()
    point = checkpoint.latest_complete(str(tmp_path))
    assert (point.step, point.epoch, point.sample) == (3, 1, 16)
    warnings = []
    assert checkpoint.find_resume_point("auto", str(tmp_path), None, warnings.append).step == 3
    assert warnings == [f"WARNING: skipping {broken}: no checkpoint.json (the save did not finish); trying the "
                        "checkpoint before it"]
    assert checkpoint.find_resume_point("disable", str(tmp_path), None) is None
    with pytest.raises(Exception, match=r"resume_from_path=.*global_step_9' is not a whole checkpoint: no checkpoint"):
        checkpoint.find_resume_point("resume_path", str(tmp_path), str(broken))


def test_config_changes_ignore_safe_keys_and_name_the_others(tmp_path):
    saved = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.structured(load_config(RLConfig, None, [])), saved)
    same = load_config(RLConfig, None, ["trainer.total_training_steps=500", "trainer.save_freq=5", "trainer.test_freq=2",
                                        "reward_model.timeout_s=5", "trainer.default_local_dir=/moved/run",
                                        "trainer.rollout_data_dir=/moved/run/gen"])  # a run folder moved or copied
    assert checkpoint.config_changes(str(saved), same) == []
    other = load_config(RLConfig, None, ["actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.rollout.n=4"])
    assert checkpoint.config_changes(str(saved), other) == [
        "actor_rollout_ref.actor.optim.lr: 0.0002 -> 0.001", "actor_rollout_ref.rollout.n: 8 -> 4"]


def test_keys_added_since_a_checkpoint_are_no_change_at_their_defaults(tmp_path):
    saved = tmp_path / "config.yaml"
    old = OmegaConf.create(OmegaConf.to_container(OmegaConf.structured(load_config(RLConfig, None, []))))
    del old.critic.model["lora_rank"]  # a run saved before the key existed
    OmegaConf.save(old, saved)
    assert checkpoint.config_changes(str(saved), load_config(RLConfig, None, [])) == []
    assert checkpoint.config_changes(str(saved), load_config(RLConfig, None, ["critic.model.lora_rank=8"])) == [
        "critic.model.lora_rank: '<absent>' -> 8"]


def test_rng_state_round_trip():
    plain, tensors = checkpoint.rng_state()
    plain = json.loads(json.dumps(plain))  # it is stored as JSON
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpoint.set_rng_state(plain, tensors)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.parametrize("save_freq,saved", [(2, [2, 4, 5]), (-1, [5]), (0, []), (10, [5])])
def test_save_schedule(save_freq, saved):
    c = Checkpointing(save_freq, None, None)
    assert [s for s in range(1, 6) if c.due(s, last=s == 5)] == saved


def test_tracker_on_resume_keeps_the_checkpoints_steps_only(tmp_path):
    t = Tracker(["file"], str(tmp_path))
    for step in range(5):
        t.log({"x": float(step)}, step)
    t.close()
    with open(t.path, "a") as f:
        f.write('{"step": 5, "x": 1.')  # a kill mid-write leaves half a line
    t = Tracker(["file"], str(tmp_path), resume_step=2)  # steps 3, 4 were logged after the checkpoint: redone
    t.log({"x": 30.0}, 3)
    t.close()
    rows = [json.loads(line) for line in open(t.path)]
    assert [(r["step"], r["x"]) for r in rows] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 30.0)]
