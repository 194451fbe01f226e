"""`hybridrl sweep` over trials that use trainer.backend=ray themselves (issue #38 part 1): each trial gets a
placement group of one bundle for its driver and one per worker, its workers are created inside it, and its
metrics are those of the same config run alone on the Ray backend."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("ray.tune")

from test_ray import assert_trains_like, overrides, read_metrics, train  # noqa: E402
from test_sweep import finish, hybridrl, trials  # noqa: E402

pytestmark = pytest.mark.slow

RAY_CPUS = 2  # the `cluster` fixture's size, for the runs alone: a driver's core + one worker's
LR = "actor_rollout_ref.actor.optim.lr"
RAY = ["trainer.backend=ray", "trainer.n_gpus_per_node=1", "trainer.worker_timeout_s=120"]
SWEEP_SETS = ("trainer.default_local_dir=", f"{LR}=")  # the sweep sets the run folder; the space sets the lr


def test_ray_backend_trials_run_in_their_placement_group_and_equal_their_configs_alone(arith_data, tmp_path,
                                                                                        cluster):
    """Tolerances as in test_ray.py (assert_trains_like): the runs alone have 2 torch threads per worker, a
    trial's worker 1 (its bundle's core), so sums run in another order."""
    base = [o for o in overrides(arith_data, tmp_path / "unused", *RAY) if not o.startswith(SWEEP_SETS)]
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(json.dumps({"base": {"overrides": base}, "space": {LR: {"grid": [1e-3, 1e-4]}},
                                 "search": "grid", "metric": "critic/score/mean", "mode": "max",
                                 "output": str(tmp_path / "out")}))
    out = finish(hybridrl("sweep", str(sweep)))
    # this machine's cores / 2 per trial (a driver and 1 worker): the bound the derivation shows
    assert re.search(r"\d+ cores / 2 per trial", out) and "each trial: a placement group of 2 bundles" in out
    assert "2 trials, 0 failed" in out
    found = {t["sampled"][LR]: (d, t) for d, t in trials(tmp_path / "out").items()}
    groups = {info["placement_group"] for _, info in found.values()}
    assert len(groups) == 2 and None not in groups  # each trial its own placement group
    consoles = [(tmp_path / "out" / d / "logs" / "console.log").read_text() for d, _ in found.values()]
    assert all("backend=ray: 1 actor worker(s) (1 torch threads each) on 1 node(s)" in c for c in consoles)
    for (_, info), console in zip(found.values(), consoles):  # RayRoles checked every worker against its group
        assert f"all in placement group {info['placement_group']}" in console

    alone = {lr: train(overrides(arith_data, tmp_path / f"alone{lr}", *RAY, f"{LR}={lr}")) for lr in (1e-3, 1e-4)}
    assert alone[1e-3][3]["actor/grad_norm"] != alone[1e-4][3]["actor/grad_norm"]  # the swept value matters
    for lr, expected in alone.items():
        run_dir, info = found[lr]
        assert info["status"] == "finished"
        assert_trains_like(expected, read_metrics(tmp_path / "out" / run_dir / "metrics.jsonl"))
