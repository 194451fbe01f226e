"""What `make train` gives (issue #37): the built-in `hybridrl train`, no config and no overrides but the seed,
for 4 seeds x 2 precisions, each a fresh process, serial. `auto` precision is bf16 on a CPU with bf16
instructions and fp32 elsewhere; HYBRIDRL_AUTO_DTYPE=fp32 gives here what an AVX2-only CPU gets. The default
seed (1) runs with no seed keys at all, so one row is a plain `make train`; other seeds set data.seed (the
prompt shuffle) and trainer.seed (the sampling). Writes bench/results/default_run.{json,md} and
docs/default_run.png (`hybridrl plot` of every run).

    .venv/bin/python bench/default_run.py                   # 8 runs of ~2 min each on 2 quiet cores
    .venv/bin/python bench/default_run.py --seeds 1 --precisions fp32

Runs use the machine's default threads (torch: one per core). On a machine other processes load, a run's
threads wait for each other: the 1-minute load average before each run is recorded next to its times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]  # this checkout's hybridrl, as its runs (`python -m hybridrl` in ROOT) use
from precision_curves import cpu_line, write_results  # noqa: E402  (CPU kind and matmul peaks; the result files)

DEFAULT_SEED = 1  # data.seed's and trainer.seed's schema default
PRECISIONS = {"auto": None, "fp32": "fp32"}  # name -> HYBRIDRL_AUTO_DTYPE (None: unset, this CPU's choice)
AUTO_ENV = "HYBRIDRL_AUTO_DTYPE"
VAL = "val-core/arithmetic/reward/mean@1"


def train(run_dir: str, seed: int, auto_dtype: str | None, log: str, steps: int = 0) -> dict:
    """One `hybridrl train` of this checkout in a fresh process: its wall and CPU seconds (children counted)."""
    seeds = [] if seed == DEFAULT_SEED else [f"data.seed={seed}", f"trainer.seed={seed}"]
    seeds += [f"trainer.total_training_steps={steps}"] if steps else []  # a quick try only
    env = {k: v for k, v in os.environ.items() if k != AUTO_ENV} | ({AUTO_ENV: auto_dtype} if auto_dtype else {})
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "hybridrl", "train", *seeds, f"trainer.default_local_dir={run_dir}",
                               "trainer.resume_mode=disable", "trainer.save_freq=0"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"run failed (exit {done.returncode}); see {log}")
    bf16 = "mixed_precision.param_dtype=bf16 (auto" in open(log).read()  # what `auto` resolved to, as logged
    return {"wall_s": time.perf_counter() - start, "load_before": load, "dtype": "bf16" if bf16 else "fp32",
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def summarize(run_dir: str) -> dict:
    """The greedy validation curve, its start, end, gain in points and best step."""
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    val = [(r["step"], r[VAL]) for r in rows if VAL in r]
    peak_step, peak = max(val, key=lambda sv: sv[1])
    return {"val": val, "start": val[0][1], "end": val[-1][1], "gain_points": 100 * (val[-1][1] - val[0][1]),
            "peak": peak, "peak_step": peak_step}


def markdown(results: dict, cmd: str, cpu: str) -> str:
    weakest = min(results, key=lambda k: results[k]["gain_points"])
    steps = [s for s, _ in next(iter(results.values()))["val"]]
    lines = [f"CPU: {cpu}. Command: `{cmd}` ({datetime.date.today()}).", "",
             "| precision | seed | start → end | gain | peak (step) | wall s | CPU-s | load before |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    for name, r in results.items():
        mark = " **(weakest)**" if name == weakest else ""
        lines.append(f"| {r['precision']} | {r['seed']}{' (default)' if r['seed'] == DEFAULT_SEED else ''} | "
                     f"{100 * r['start']:.1f} → {100 * r['end']:.1f} % | {r['gain_points']:+.1f}{mark} | "
                     f"{100 * r['peak']:.1f} ({r['peak_step']}) | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
                     f"{r['load_before']:.1f} |")
    lines += ["", f"Greedy validation accuracy (%) at steps {', '.join(map(str, steps))}:", ""]
    lines += [f"- {n}: " + ", ".join(f"{100 * v:.1f}" for _, v in r["val"]) for n, r in results.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "hybridrl-default-runs"),
                   help="where the run folders go (their metrics.jsonl; no checkpoints are saved)")
    p.add_argument("--steps", type=int, default=0, help="trainer.total_training_steps (0: the default's; for a quick try)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cpu = cpu_line()
    results = {}
    for seed in a.seeds:
        for name in a.precisions:  # alternating, so load drift hits both precisions alike
            key = f"{name}-seed{seed}"
            run_dir = os.path.join(a.out, key)
            print(f"{key} ...", flush=True)
            cost = train(run_dir, seed, PRECISIONS[name], run_dir + ".log", a.steps)
            results[key] = {"seed": seed, **cost, **summarize(run_dir)}
            results[key]["precision"] = f"{name} ({cost['dtype']})" if name == "auto" else name
            r = results[key]
            print(f"  {100 * r['start']:.1f} -> {100 * r['end']:.1f} % ({r['gain_points']:+.1f}), "
                  f"{cost['wall_s']:.0f} s wall, {cost['cpu_s']:.0f} CPU-s", flush=True)
    png = os.path.join(ROOT, "docs", "default_run.png")
    subprocess.run([sys.executable, "-m", "hybridrl", "plot", *[os.path.join(a.out, k) for k in results], "-o", png],
                   check=True, cwd=ROOT)
    cmd = ("python bench/default_run.py " + " ".join(sys.argv[1:])).strip()
    md = markdown(results, cmd, cpu)
    write_results("default_run", {"cpu": cpu, "command": cmd, "results": results}, md)


if __name__ == "__main__":
    main()
