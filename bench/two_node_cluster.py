"""A real two-node Ray cluster on this machine, and the logs of a run on it (issue #38 part 4); needs root.

    sudo .venv/bin/python bench/two_node_cluster.py --out bench/results/two_node_cluster.md

Makes the cluster of tests/integration/netns_cluster.py (two network namespaces on a veth pair, a Ray head in
one, a worker node in the other, one CPU each), then, with the driver in the head's namespace:
1. trains 8 steps of the tiny task with one worker per node (trainer.nnodes=2 trainer.n_gpus_per_node=1);
2. runs it again with a checkpoint every step and SIGKILLs every process of the worker node after the second;
3. starts the worker node again and resumes the run.
Writes every command and its whole output, with the time from the kill to the driver's exit, as markdown.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from netns_cluster import NetnsCluster, why_unavailable  # noqa: E402

from hybridrl.data.arithmetic import write_dataset  # noqa: E402

STEPS, KILL_AFTER, TIMEOUT_S = 8, 2, 60


def train_args(cluster: NetnsCluster, data: dict, run_dir: str, *extra: str) -> list[str]:
    return ["train", f"data.train_files={data['train']}", f"data.val_files={data['val']}", "data.val_max_samples=8",
            "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.optim.warmup_style=constant", "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.backend=ray", "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
            f"ray_kwargs.ray_init.address={cluster.address}", f"trainer.total_training_steps={STEPS}",
            f"trainer.test_freq={STEPS}", f"trainer.worker_timeout_s={TIMEOUT_S}", f"trainer.default_local_dir={run_dir}",
            *extra]


def start(cluster: NetnsCluster, args: list[str]) -> tuple[subprocess.Popen, str]:
    line = " ".join(cluster.exec_args("a", "python", "-m", "hybridrl", *args))
    proc = subprocess.Popen(cluster.exec_args("a", sys.executable, "-m", "hybridrl", *args), env=cluster.env,
                            cwd=os.path.dirname(HERE), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, line


def section(title: str, line: str, out: str, note: str = "") -> str:
    return f"## {title}\n\n{note}```text\n$ {line}\n{out.rstrip()}\n```\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    out_path = parser.parse_args().out
    reason = why_unavailable()
    if reason:
        sys.exit(f"two_node_cluster: {reason}")
    work = tempfile.mkdtemp(prefix="two-node-")
    data = write_dataset(os.path.join(work, "data"), train_size=300, val_size=40, seed=0)
    cluster = NetnsCluster(work)
    parts = []
    try:
        cluster.up()
        worker_ids = tuple(set(cluster.wait_for_nodes(2)) - {cluster.head_id})
        parts.append(f"Nodes: head {cluster.ip['a']} (namespace {cluster.ns['a']}), worker {cluster.ip['b']} "
                     f"(namespace {cluster.ns['b']}), {cluster.address}, one CPU each.\n")
        proc, line = start(cluster, train_args(cluster, data, os.path.join(work, "whole")))
        parts.append(section("1. One worker on each node", line, proc.communicate()[0]))
        cut = os.path.join(work, "cut")
        proc, line = start(cluster, train_args(cluster, data, cut, "trainer.save_freq=1"))
        latest = os.path.join(cut, "latest_checkpointed_iteration.txt")
        while not (os.path.isfile(latest) and int(open(latest).read() or 0) >= KILL_AFTER) and proc.poll() is None:
            time.sleep(0.05)
        cluster.kill_node("b")
        killed = time.monotonic()
        text = proc.communicate()[0]
        note = (f"Every process of the worker node SIGKILLed once `global_step_{KILL_AFTER}` was saved; the driver "
                f"exited {time.monotonic() - killed:.1f} s later with code {proc.returncode} "
                f"(trainer.worker_timeout_s={TIMEOUT_S}); the newest checkpoint: "
                f"global_step_{open(latest).read().strip()}.\n\n")
        parts.append(section("2. The worker node killed mid-run", line, text, note))
        cluster.start_node("b")
        cluster.wait_for_nodes(2, gone=worker_ids)  # the new node, not the killed one the head may still count
        proc, line = start(cluster, train_args(cluster, data, cut, "trainer.save_freq=1"))
        parts.append(section("3. The node started again; the run resumed", line, proc.communicate()[0]))
    finally:
        cluster.down()
    head = (f"# A two-node Ray cluster on one machine (network namespaces)\n\nMade {datetime.date.today()} by "
            f"`sudo .venv/bin/python bench/two_node_cluster.py --out {out_path}` (see its docstring).\n\n")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(head + "\n".join(parts))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
