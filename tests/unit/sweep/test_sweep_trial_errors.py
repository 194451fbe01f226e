"""A trial whose run stops on an error hybridrl names (a data file, a worker that died) records it in trial.json,
where `hybridrl compare` shows it; before, only Ray's error.txt held it and compare said "stopped at step 0"."""

from __future__ import annotations

import json
import types

import pytest

from hybridrl.errors import DataError
from hybridrl.sweep.results import read_sweep
from hybridrl.sweep.spec import Base

pytest.importorskip("ray.tune")


def test_a_run_error_is_the_trials_error_in_the_results(tmp_path, monkeypatch, arith_data):
    import ray
    from ray import tune

    from hybridrl.sweep import trial
    from hybridrl.trainer import launch

    monkeypatch.setattr(tune, "get_context", lambda: types.SimpleNamespace(get_trial_id=lambda: "t_00000"))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "10.0.0.7")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_placement_group_id=lambda: None))

    def fails(run_plan, callbacks):
        raise DataError("data.val_files: file not found: gone.parquet")

    monkeypatch.setattr(launch, "launch", fails)
    (tmp_path / "sweep.yaml").write_text("space: {actor_rollout_ref.actor.optim.lr: {grid: [1.0e-5]}}\n"
                                         "metric: val-core/arithmetic/reward/mean@1\nmode: max\n")
    base = Base(overrides=[f"data.train_files=[{arith_data['train']}]", f"data.val_files=[{arith_data['val']}]",
                           "trainer.total_training_steps=2"])
    with pytest.raises(trial.TrialRunError, match=r"data\.val_files: file not found: gone\.parquet"):
        trial.run_trial({"actor_rollout_ref.actor.optim.lr": 1e-5}, base, str(tmp_path), threads=1)
    info = json.loads((tmp_path / "t_00000" / "trial.json").read_text())
    assert (info["status"], info["error"], info["node"]) == (
        "error", "data.val_files: file not found: gone.parquet", "10.0.0.7")
    (row,) = read_sweep(str(tmp_path))[1]
    assert (row.status, row.error) == ("error", "data.val_files: file not found: gone.parquet")
