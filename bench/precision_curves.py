"""bf16 against fp32 on the default task (issue #21): `hybridrl train` with the built-in config, two seeds
per precision, the validation curves side by side and one `hybridrl plot` figure of all four runs.

    .venv/bin/python bench/precision_curves.py                 # 4 runs of the default 200 steps, ~10 min on 2 quiet cores
    .venv/bin/python bench/precision_curves.py --seeds 1 --steps 20

bf16 here is every bf16 lever at once: the policy computes under bf16 autocast over fp32 master weights and
fp32 AdamW state (`actor.fsdp_config.mixed_precision.param_dtype=bf16`) and the rollout engine generates in
bf16 (`rollout.dtype=bfloat16`), with token-level truncated importance sampling correcting the engine/trainer
mismatch (`algorithm.rollout_correction.rollout_is=token`). A seed sets both the prompt shuffle (`data.seed`)
and the sampling (`trainer.seed`). Runs are serial, each a fresh process; the precisions alternate so load
drift hits both alike. Writes bench/results/precision_curves.{json,md} and docs/bf16_vs_fp32.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from levers import machine_info  # noqa: E402  (CPU kind and measured matmul peaks)

BIN = os.path.join(os.path.dirname(sys.executable), "hybridrl")
PRECISIONS = {
    "fp32": [],
    "bf16": ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
             "actor_rollout_ref.rollout.dtype=bfloat16", "algorithm.rollout_correction.rollout_is=token"],
}


def train(run_dir: str, overrides: list[str], log: str) -> dict:
    """One `hybridrl train` in a fresh process; its wall and CPU seconds (every child process counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run([BIN, "train", *overrides, f"trainer.default_local_dir={run_dir}",
                               "trainer.resume_mode=disable", "trainer.save_freq=0", "trainer.logger=[console,file]"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"run failed (exit {done.returncode}); see {log}")
    return {"wall_s": time.perf_counter() - start,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def summarize(run_dir: str) -> dict:
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    val = [(r["step"], r[k]) for r in rows for k in r if k.startswith("val-core/") and "/reward/mean@" in k]
    steps = [r for r in rows if "timing_s/step" in r]
    rewards = [r["critic/score/mean"] for r in steps if "critic/score/mean" in r]
    diffs = [r["training/rollout_probs_diff_max"] for r in steps if "training/rollout_probs_diff_max" in r]
    return {"val": val, "reward_first10": statistics.mean(rewards[:10]), "reward_last10": statistics.mean(rewards[-10:]),
            "step_s": statistics.median(r["timing_s/step"] for r in steps[1:]),
            "probs_diff_max": max(diffs) if diffs else None}


def markdown(results: dict, cmd: str, cpu: str) -> str:
    seeds = sorted({r["seed"] for r in results.values()})
    steps = [s for s, _ in next(iter(results.values()))["val"]]
    lines = [f"CPU: {cpu}. Command: `{cmd}` ({datetime.date.today()}).", "",
             "| precision | seed | validation accuracy at steps " + ", ".join(map(str, steps)) +
             " | reward first/last 10 | median s/step | run wall s | run CPU-s | max engine/trainer prob diff |",
             "|---|---:|---|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        curve = ", ".join(f"{100 * v:.1f}" for _, v in r["val"])
        diff = "n/a" if r["probs_diff_max"] is None else f"{r['probs_diff_max']:.3g}"
        lines.append(f"| {r['precision']} | {r['seed']} | {curve} % | {r['reward_first10']:.2f} → "
                     f"{r['reward_last10']:.2f} | {r['step_s']:.2f} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | {diff} |")
    lines.append("")
    for p in PRECISIONS:
        ends = [100 * r["val"][-1][1] for r in results.values() if r["precision"] == p]
        if ends:
            lines.append(f"- {p}: final accuracy {', '.join(f'{e:.1f}' for e in ends)} % over seeds {seeds} "
                         f"(mean {statistics.mean(ends):.1f} %)")
    return "\n".join(lines) + "\n"


def cpu_line() -> str:
    """This CPU, its flags and its matmul peaks measured now, for a results table's first line."""
    m = machine_info(0)
    return (f"{m['cpu_model']} ({m['cpu_count']} cores; {', '.join(m['cpu_flags'])}); measured matmul peak "
            f"{m['fp32_gflops']:.0f} GFLOP/s fp32, {m['bf16_gflops']:.0f} GFLOP/s bf16")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=0, help="trainer.total_training_steps (0: the default config's)")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "hybridrl-precision-runs"),
                   help="where the run folders go (their metrics.jsonl; no checkpoints are saved)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cpu = cpu_line()
    results = {}
    for seed in a.seeds:
        for name, levers in PRECISIONS.items():
            run_dir = os.path.join(a.out, f"{name}-seed{seed}")
            extra = [f"data.seed={seed}", f"trainer.seed={seed}", *levers]
            if a.steps:
                extra.append(f"trainer.total_training_steps={a.steps}")
            print(f"{name} seed {seed} ...", flush=True)
            cost = train(run_dir, extra, run_dir + ".log")
            results[f"{name}-seed{seed}"] = {"precision": name, "seed": seed, **cost, **summarize(run_dir)}
            print(f"  {results[f'{name}-seed{seed}']['val'][-1]}, {cost['wall_s']:.0f} s", flush=True)
    png = os.path.join(ROOT, "docs", "bf16_vs_fp32.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    subprocess.run([BIN, "plot", *[os.path.join(a.out, n) for n in results], "-o", png], check=True)
    cmd = "python bench/precision_curves.py " + " ".join(sys.argv[1:])
    md = markdown(results, cmd.strip(), cpu)
    write_results("precision_curves", {"cpu": cpu, "command": cmd, "results": results}, md)


def write_results(name: str, payload: dict, md: str) -> None:
    """bench/results/<name>.json (the runs) and .md (the table), and the table on stdout."""
    out = os.path.join(ROOT, "bench", "results", name)
    json.dump(payload, open(out + ".json", "w"), indent=1)
    open(out + ".md", "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
