"""Asynchronous against synchronous training on the default task (issue #24): `hybridrl train` with the built-in
config on the Ray backend, synchronous (one trainer worker) and with a rollout pool (one trainer worker + one
rollout worker) at staleness 1 and 2, with and without partial rollouts; the validation curves side by side and
one `hybridrl plot` figure of every run.

    .venv/bin/python bench/async_curves.py                        # every row, 100 steps each
    .venv/bin/python bench/async_curves.py --rows sync s1 --steps 20

Without partial rollouts an async run's samples do not depend on timing (trainer/async_rollout.py), so its curve
is the same on a busy machine; its wall time is not. Every row is fp32 (`HYBRIDRL_AUTO_DTYPE=fp32`) and lagged
batches use the rollout's log-probs as π_old (async_training.use_rollout_log_probs, verl's default). Runs are
serial, each a fresh process. Writes bench/results/async_curves.{json,md} (rows of earlier invocations are kept
unless re-run) and docs/async_vs_sync.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from precision_curves import BIN, cpu_line, summarize, train  # noqa: E402  (a run in a fresh process; its curve)

RAY = ["trainer.backend=ray", "trainer.n_gpus_per_node=1"]
POOL = ["rollout.n_gpus_per_node=1", "rollout.nnodes=1", "async_training.trigger_parameter_sync_step=1"]
ROWS = {
    "sync": ("synchronous (1 worker)", RAY),
    "s1": ("staleness 1 (one step off)", RAY + POOL + ["async_training.staleness_threshold=1"]),
    "s2": ("staleness 2", RAY + POOL + ["async_training.staleness_threshold=2"]),
    "s1-partial": ("staleness 1 + partial rollouts",
                   RAY + POOL + ["async_training.staleness_threshold=1", "async_training.partial_rollout=true"]),
    "s2-partial": ("staleness 2 + partial rollouts",
                   RAY + POOL + ["async_training.staleness_threshold=2", "async_training.partial_rollout=true"]),
}


def staleness(run_dir: str) -> dict:
    """The mean and max version lag over the run's steps (0 for a synchronous run)."""
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    means = [r["async/staleness_mean"] for r in rows if "async/staleness_mean" in r]
    maxes = [r["async/staleness_max"] for r in rows if "async/staleness_max" in r]
    return {"staleness_mean": statistics.mean(means) if means else 0.0, "staleness_max": max(maxes) if maxes else 0.0}


def markdown(results: dict, cpu: str) -> str:
    steps = [s for s, _ in next(iter(results.values()))["val"]]
    lines = [f"CPU: {cpu}.", "",
             "| run | validation accuracy at steps " + ", ".join(map(str, steps)) +
             " | reward first/last 10 | mean / max staleness | median s/step | run wall s | run CPU-s | command |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for name, r in results.items():
        curve = ", ".join(f"{100 * v:.1f}" for _, v in r["val"])
        lines.append(f"| {r['label']} | {curve} % | {r['reward_first10']:.2f} → {r['reward_last10']:.2f} | "
                     f"{r['staleness_mean']:.2f} / {r['staleness_max']:.0f} | {r['step_s']:.2f} | {r['wall_s']:.0f} | "
                     f"{r['cpu_s']:.0f} | `{r['command']}` ({r['date']}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--steps", type=int, default=0, help="trainer.total_training_steps (0: the default config's)")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "hybridrl-async-runs"),
                   help="where the run folders go (their metrics.jsonl; no checkpoints are saved)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cpu = cpu_line()
    out = os.path.join(ROOT, "bench", "results", "async_curves")
    old = json.load(open(out + ".json"))["results"] if os.path.exists(out + ".json") else {}
    cmd = "python bench/async_curves.py " + " ".join(sys.argv[1:])
    for name in a.rows:
        label, overrides = ROWS[name]
        run_dir = os.path.join(a.out, name)
        extra = overrides + ([f"trainer.total_training_steps={a.steps}"] if a.steps else [])
        print(f"{label} ...", flush=True)
        cost = train(run_dir, extra, run_dir + ".log")
        old[name] = {"label": label, "command": cmd.strip(), "date": str(datetime.date.today()), **cost,
                     **summarize(run_dir), **staleness(run_dir), "run_dir": run_dir}
        print(f"  {old[name]['val'][-1]}, {cost['wall_s']:.0f} s", flush=True)
    results = {k: old[k] for k in ROWS if k in old}  # the table in ROWS' order
    runs = [r["run_dir"] for r in results.values() if os.path.exists(os.path.join(r["run_dir"], "metrics.jsonl"))]
    png = os.path.join(ROOT, "docs", "async_vs_sync.png")
    subprocess.run([BIN, "plot", *runs, "-o", png], check=True)
    json.dump({"cpu": cpu, "results": results}, open(out + ".json", "w"), indent=1)
    md = markdown(results, cpu)
    open(out + ".md", "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
