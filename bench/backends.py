"""trainer.backend=local vs ray (2 data-parallel workers, ddp and fsdp2) on the tiny task, back to back in one invocation.

    .venv/bin/python bench/backends.py --steps 12 --rounds 2

Runs `hybridrl train` alternately (local, ray, ray+fsdp2, local, ...) with the default GRPO config and
no validation or checkpoints, and prints a markdown table per backend: median seconds per step
(the first 2 steps are warm-up), its generation and update parts, process CPU-seconds of the
driver per step, and the wall time of the whole command (start-up included: Ray's cluster and the
workers' imports). On this 2-core machine the workers split the same 2 cores the local run uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

CONFIGS = {"local": [], "ray (2 workers)": ["trainer.backend=ray", "trainer.n_gpus_per_node=2"],
           "ray (2 workers, fsdp2)": ["trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                      "actor_rollout_ref.actor.strategy=fsdp2"]}


def run(name: str, steps: int, folder: str) -> dict:
    args = [sys.executable, "-m", "hybridrl", "train", f"trainer.total_training_steps={steps}", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "data.val_files=[]", "trainer.save_freq=0", "trainer.resume_mode=disable",
            f"trainer.default_local_dir={folder}", *CONFIGS[name]]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))][2:]  # warm-up dropped
    med = lambda key: statistics.median(r[key] for r in records)  # noqa: E731
    return {"step_s": med("timing_s/step"), "gen_s": med("timing_s/gen"), "update_s": med("timing_s/update_actor"),
            "cpu_s": med("perf/cpu_time_s"), "tokens_per_s": med("perf/throughput") * (2 if "ray" in name else 1),
            "command_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for name in CONFIGS:
                results[name].append(run(name, a.steps, os.path.join(tmp, f"{i}_{len(results[name])}_{name[:3]}")))
    print("| backend | s/step (median) | generation s | actor update s | driver CPU-s/step | tokens/s (all workers) "
          "| whole command s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"| {name} | {m['step_s']:.2f} | {m['gen_s']:.2f} | {m['update_s']:.2f} | {m['cpu_s']:.2f} | "
              f"{m['tokens_per_s']:.0f} | {m['command_s']:.0f} |")


if __name__ == "__main__":
    main()
