"""trainer.backend=ray and `hybridrl sweep` on a real two-node Ray cluster (issue #38 part 4): two network
namespaces on this machine, each a Ray node with its own raylet, object store and address (netns_cluster.py).

One worker trains on each node (gloo across the namespaces); killing the worker node mid-run stops the run with a
WorkerError within trainer.worker_timeout_s, its last checkpoint whole; a node started again joins and the
resumed run equals the uninterrupted one; a sweep joins the cluster and its trials run on both nodes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

pytest.importorskip("ray.tune")

from hybridrl.trainer.checkpoint import LATEST, latest_complete  # noqa: E402
from netns_cluster import REPO, NetnsCluster, why_unavailable  # noqa: E402
from run_helpers import Hold  # noqa: E402
from test_ray import overrides, read_metrics  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 4
KILL_AFTER = 2  # the run is held (run_helpers.Hold) right after saving global_step_2, and the node killed there
TIMEOUT_S = 60  # trainer.worker_timeout_s of these runs


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    cluster = NetnsCluster(str(tmp_path_factory.mktemp("ray-logs")))
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def hold(tmp_path_factory):
    """Every run of this module scores with it (un-armed: the built-in scorers); the kill test arms it."""
    runs = tmp_path_factory.getbasetemp() / "test_killing*" / LATEST
    return Hold(tmp_path_factory.mktemp("hold"), str(runs), at_least=KILL_AFTER)


def train_args(cluster: NetnsCluster, arith_data, run_dir, hold: Hold, *extra: str) -> list[str]:
    return ["train", *overrides(arith_data, run_dir, *hold.args(), "trainer.backend=ray", "trainer.nnodes=2",
                                "trainer.n_gpus_per_node=1", f"ray_kwargs.ray_init.address={cluster.address}",
                                f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}",
                                f"trainer.worker_timeout_s={TIMEOUT_S}", *extra)]


def hybridrl_in_a(cluster: NetnsCluster, args: list[str]) -> subprocess.Popen:
    """`python -m hybridrl ARGS` run in the head's namespace (this checkout's package)."""
    return subprocess.Popen(cluster.exec_args("a", sys.executable, "-m", "hybridrl", *args), cwd=REPO,
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.fixture(scope="module")
def whole(two_nodes, arith_data, hold, tmp_path_factory):
    """The uninterrupted two-node run: (its output, its metrics)."""
    run_dir = tmp_path_factory.mktemp("whole")
    out = finish(hybridrl_in_a(two_nodes, train_args(two_nodes, arith_data, run_dir, hold)))
    return out, read_metrics(run_dir / "metrics.jsonl")


def test_one_worker_on_each_node_trains_over_gloo_across_the_namespaces(whole):
    out, records = whole
    # rank 0 hosts the process group at its node's own address (not the host name's 127.0.0.1: no other node
    # reaches that), on whichever node Ray put it
    assert re.search(r"backend=ray: 2 actor worker\(s\) \(1 torch threads each\) on 2 node\(s\), process group at "
                     r"10\.87\.0\.[12]:\d+", out), out[-3000:]
    assert [r["step"] for r in records] == list(range(STEPS + 1))
    assert max(r.get("actor/grad_norm", 0.0) for r in records) > 0  # an update happened


def test_killing_the_worker_node_stops_the_run_and_a_rejoined_node_resumes_it(two_nodes, whole, hold, arith_data,
                                                                              tmp_path):
    """The kill comes right after global_step_2 is saved (the driver held in step 3's reward, the workers idle);
    once the driver goes on, the run must stop with the named error, not hang, and well before the timeout (the
    surviving rank's collective fails as its peer's sockets close)."""
    nodes_before = two_nodes.wait_for_nodes(2)
    args = train_args(two_nodes, arith_data, tmp_path, hold, "trainer.save_freq=1")
    hold.arm()
    proc = hybridrl_in_a(two_nodes, args)
    latest = tmp_path / LATEST
    hold.wait(proc)
    two_nodes.kill_node("b")
    hold.release()
    killed = time.monotonic()
    out, _ = proc.communicate(timeout=TIMEOUT_S + 60)
    stopped_s = time.monotonic() - killed
    print(f"stopped {stopped_s:.1f} s after the kill; its error: {out.strip().splitlines()[-1]}")
    assert proc.returncode == 2, out[-4000:]  # a HybridRLError: one line, exit 2 (cli.main)
    assert re.search(r"^hybridrl train: error: \w+\.\w+(: the worker of| raised on| did not finish on) rank",
                     out, re.M), out[-4000:]
    assert stopped_s < TIMEOUT_S
    saved = int(latest.read_text())
    assert saved == KILL_AFTER
    point = latest_complete(str(tmp_path))
    assert point is not None and point.step == saved  # the newest checkpoint is whole (manifest and sizes)

    two_nodes.start_node("b")
    two_nodes.wait_for_nodes(2, gone=tuple(set(nodes_before) - {two_nodes.head_id}))
    finish(hybridrl_in_a(two_nodes, args))  # trainer.resume_mode=auto: from global_step_<saved>
    resumed = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in resumed] == list(range(STEPS + 1))
    for a, b in zip(whole[1], resumed):  # test_ray's resume tolerance: the same float sums
        assert a.keys() == b.keys()
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key)


def test_a_sweep_joins_the_cluster_and_its_trials_run_on_both_nodes(two_nodes, arith_data, tmp_path):
    """Two trials of one CPU each on two one-CPU nodes: both run at once, one per node."""
    two_nodes.wait_for_nodes(2)
    base = {"data.train_files": [arith_data["train"]], "data.val_files": [arith_data["val"]],
            "data.val_max_samples": 8, "data.train_batch_size": 8, "actor_rollout_ref.rollout.n": 4,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
            "trainer.total_training_steps": 2, "trainer.test_freq": 2, "trainer.logger": ["file"],
            "ray_kwargs.ray_init.address": two_nodes.address}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": {"overrides": base}, "search": "grid",
                                     "space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-3, 3e-4]}},
                                     "metric": "val-core/arithmetic/reward/mean@1", "mode": "max",
                                     "output": str(tmp_path / "out")}))
    out = finish(hybridrl_in_a(two_nodes, ["sweep", str(sweep)]))
    assert f"joined the Ray cluster at {two_nodes.address}: 2 node(s), 2 CPUs" in out, out[-3000:]
    assert "each trial: 1 CPU core(s)" in out and "2 trials, 0 failed" in out, out[-3000:]
    infos = [json.loads((tmp_path / "out" / d / "trial.json").read_text()) for d in os.listdir(tmp_path / "out")
             if (tmp_path / "out" / d / "trial.json").is_file()]
    assert [i["status"] for i in infos] == ["finished", "finished"]
    assert sorted(i["node"] for i in infos) == [two_nodes.ip["a"], two_nodes.ip["b"]]
