"""Train the bundled model once per algorithm (same seed, same budget) and print a markdown table.

    .venv/bin/python bench/algorithms.py --steps 50 --jobs 2 > docs/algorithms_table.md

Each run is `hybridrl train` with the overrides below; with --jobs 2 two runs share the 2 cores,
one thread each (OMP_NUM_THREADS=1), so wall times in the table are per run under that sharing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

A = "actor_rollout_ref.actor."
ALGORITHMS: dict[str, list[str]] = {
    "GRPO": [],
    "GRPO + KL loss (k3, 0.01)": [f"{A}use_kl_loss=true", f"{A}kl_loss_coef=0.01"],
    "Dr.GRPO": ["algorithm.norm_adv_by_std_in_grpo=false", f"{A}loss_agg_mode=seq-mean-token-sum-norm"],
    "DAPO clip-higher (0.2 / 0.28)": [f"{A}clip_ratio_high=0.28"],
    "RLOO": ["algorithm.adv_estimator=rloo"],
    "REINFORCE++": ["algorithm.adv_estimator=reinforce_plus_plus"],
    "REINFORCE++ baseline": ["algorithm.adv_estimator=reinforce_plus_plus_baseline"],
    "OPO": ["algorithm.adv_estimator=opo"],
    "GRPO pass@k": ["algorithm.adv_estimator=grpo_passk"],
    "GPG": ["algorithm.adv_estimator=gpg", f"{A}policy_loss.loss_mode=gpg"],
    "GSPO": [f"{A}policy_loss.loss_mode=gspo", f"{A}loss_agg_mode=seq-mean-token-mean",
             f"{A}clip_ratio_low=3e-4", f"{A}clip_ratio_high=4e-4"],
    "CISPO": [f"{A}policy_loss.loss_mode=cispo"],
    "SAPO": [f"{A}policy_loss.loss_mode=sapo", f"{A}loss_agg_mode=seq-mean-token-mean"],
    "PPO (GAE + critic)": ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-4"],
    "PPO + KL in reward (adaptive)": ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-4",
                                      "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                                      "algorithm.kl_ctrl.kl_coef=0.01", "algorithm.kl_ctrl.target_kl=0.01"],
    "ReMax": ["algorithm.adv_estimator=remax"],
    "DAPO (dynamic sampling + overlong buffer + clip-higher)": [
        "algorithm.filter_groups.enable=true", "reward_model.overlong_buffer.enable=true",
        "reward_model.overlong_buffer.len=4", f"{A}clip_ratio_high=0.28"],
}


def run_one(name: str, overrides: list[str], steps: int, out_root: str) -> dict:
    run_dir = os.path.join(out_root, re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"))
    cmd = [sys.executable, "-m", "hybridrl", "train", *overrides, f"trainer.total_training_steps={steps}",
           "trainer.test_freq=10", "trainer.logger=[file]", f"trainer.default_local_dir={run_dir}",
           "trainer.resume_mode=disable", "trainer.save_freq=0"]  # a fresh measurement each time, no checkpoints
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    vals = [r for r in records if "val-core/arithmetic/reward/mean@1" in r]
    return {"name": name, "overrides": overrides, "val0": vals[0]["val-core/arithmetic/reward/mean@1"],
            "val_end": vals[-1]["val-core/arithmetic/reward/mean@1"],
            "val_best": max(v["val-core/arithmetic/reward/mean@1"] for v in vals),
            "len_end": vals[-1]["val-aux/response_length/mean"],
            "train_len_end": records[-1]["response_length/mean"], "wall": time.perf_counter() - start,
            "cpu": sum(r.get("perf/cpu_time_s", 0.0) for r in records),
            "gen_rounds": sum(r.get("train/num_gen_batches", 1.0) for r in records if "train/num_gen_batches" in r)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="checkpoints/bench_algorithms")
    p.add_argument("--only", default="", help="comma-separated algorithm names from the table (default: all)")
    p.add_argument("--extra", nargs="*", default=[], help="overrides added to every run")
    a = p.parse_args()
    chosen = {k: v + a.extra for k, v in ALGORITHMS.items() if not a.only or k in a.only.split(",")}
    with ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda kv: run_one(kv[0], kv[1], a.steps, a.out), chosen.items()))
    print(f"| algorithm | overrides (on top of the defaults) | val acc step 0 → {a.steps} (best) | "
          f"val response length at the end | wall s (train CPU-s) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        ov = " ".join(f"`{o.replace('actor_rollout_ref.actor.', 'actor.')}`" for o in r["overrides"]) or "(defaults)"
        print(f"| {r['name']} | {ov} | {r['val0']:.1%} → {r['val_end']:.1%} ({r['val_best']:.1%}) | "
              f"{r['len_end']:.2f} tokens | {r['wall']:.0f} ({r['cpu']:.0f}) |")
        if r["gen_rounds"]:
            print(f"<!-- {r['name']}: {r['gen_rounds']:.0f} generation rounds in {a.steps} steps -->")


if __name__ == "__main__":
    main()
