"""trainer.profile_timeline on real runs: the driver's phases of every step in a local run; with backend=ray one
track per process, each rank's calls inside the driver's steps."""

from __future__ import annotations

import json
import os

import pytest

from hybridrl import timeline
from hybridrl.cli import main
from hybridrl.trainer.rl import RLTrainer
from run_helpers import overrides, train

DRIVER_PHASES = {"step", "gen", "reward", "adv", "update_actor"}  # GRPO without KL: no old_log_prob, ref, values


def load(path) -> tuple[dict[int, str], list[dict]]:
    """(pid -> track name, the spans) of a timeline file."""
    events = json.loads(open(path).read())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e["ph"] == "X"]
    assert all({"name", "ts", "dur", "pid", "tid"} <= set(e) and e["pid"] in names for e in spans)
    return names, spans


def within(inner: dict, outer: dict, slack_us: int = 0) -> bool:
    return outer["ts"] - slack_us <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + slack_us


def test_train_help_lists_the_key(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "trainer.profile_timeline" in capsys.readouterr().out


@pytest.mark.slow
def test_a_local_run_writes_the_driver_phases_of_every_step(tmp_path, arith_data):
    path = tmp_path / "trace" / "t.json"
    train(overrides(arith_data, tmp_path / "run", 2, "trainer.test_freq=2", "trainer.save_freq=2",
                    f"trainer.profile_timeline={path}"))
    names, spans = load(path)
    assert list(names.values()) == ["driver"]
    steps = {e["args"]["step"]: e for e in spans if e["name"] == "step"}
    assert sorted(steps) == [1, 2]
    for n, step in steps.items():
        phases = [e for e in spans if e["args"].get("step") == n and e["name"] in DRIVER_PHASES - {"step"}]
        assert {e["name"] for e in phases} == DRIVER_PHASES - {"step"}, n
        assert all(within(e, step) for e in phases), n
    assert {e["args"]["step"] for e in spans if e["name"] == "testing"} == {0, 2}  # before training, and at the last
    assert [e["args"]["step"] for e in spans if e["name"] == "save_checkpoint"] == [2]  # written by the final flush
    assert not timeline.RECORDER.enabled  # the run switched it off again


@pytest.mark.slow
def test_a_run_that_fails_leaves_the_spans_up_to_the_failure(tmp_path, arith_data, monkeypatch):
    path, original = tmp_path / "t.json", RLTrainer.train_step

    def failing_step(self, step):
        if step == 2:
            with timeline.span("gen"):
                raise RuntimeError("boom")
        return original(self, step)

    monkeypatch.setattr(RLTrainer, "train_step", failing_step)
    with pytest.raises(RuntimeError, match="boom"):
        train(overrides(arith_data, tmp_path / "run", 3, "trainer.val_before_train=false", "trainer.save_freq=0",
                        f"trainer.profile_timeline={path}"))
    _, spans = load(path)
    assert [e["args"]["step"] for e in spans if e["name"] == "step"] == [1]
    assert [e["args"]["step"] for e in spans if e["name"] == "gen"] == [1, 2]  # the failed phase too
    assert not timeline.RECORDER.enabled


@pytest.mark.slow
def test_without_the_key_nothing_is_recorded_or_written(tmp_path, arith_data):
    train(overrides(arith_data, tmp_path / "run", 1, "trainer.val_before_train=false", "trainer.save_freq=0"))
    assert not timeline.RECORDER.enabled and timeline.drain() == []
    assert not [f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".json")]


@pytest.mark.slow
def test_a_two_worker_ray_run_has_a_track_per_process_inside_the_driver_steps(tmp_path, arith_data):
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    path = tmp_path / "t.json"
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        train(overrides(arith_data, tmp_path / "run", 2, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=0",
                        f"trainer.profile_timeline={path}"))
    finally:
        ray.shutdown()
    names, spans = load(path)
    assert sorted(names.values()) == ["actor rank 0", "actor rank 1", "driver"]
    assert len(names) == 3  # three processes, three pids
    steps = [e for e in spans if e["name"] == "step"]
    assert len(steps) == 2
    skew_us = 5_000  # one machine's wall clock, read by different processes
    for pid, name in names.items():
        if name == "driver":
            continue
        calls = [e for e in spans if e["pid"] == pid]
        assert {"setup", "generate", "policy_update"} <= {e["name"] for e in calls}, name
        for e in calls:
            if e["name"] in ("generate", "policy_update"):
                assert any(within(e, s, skew_us) for s in steps), (name, e)
