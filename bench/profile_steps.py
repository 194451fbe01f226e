"""Where a hybridrl GRPO step's time goes, by op category (torch.profiler), before and after the levers.

    .venv/bin/python bench/profile_steps.py            # about 5 minutes

For each case (a workload, a model and a configuration of bench/speed.py), one fresh process runs
`--steps` steps of bench/hybridrl_grpo.py and then profiles one more. The table gives that step's wall
time, the self time of its aten ops by category (matmuls, attention, copies and indexing, the
optimizer, other elementwise ops) and what was spent outside any op (Python and the framework's own
work), then each case's top ops. Against the step's compute floor (bench/speed.py's FLOPs at the
measured matmul peak) it sets what the matmuls alone take at the rate their kernels reach on these
shapes: how close to the floor the step could come if nothing but the matmuls cost time. The learning workload's "small" model comes from bench/speed.py's
cache (its short SFT; made here if missing). Writes bench/results/profile-<cpu kind>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import speed  # noqa: E402

CASES = [  # (workload, model, configuration of speed.CONFIGS): the levers off, then on one by one
    ("learning", "small", "hybridrl-like"), ("learning", "small", "hybridrl-share"),
    ("learning", "small", "hybridrl-best"), ("learning", "small", "hybridrl-bf16"),
    ("fixed", "small", "hybridrl-best"), ("fixed", "small", "hybridrl-bf16"),
    ("learning", "tiny", "hybridrl-best"), ("learning", "tiny", "hybridrl-bf16"),
    ("fixed", "tiny", "hybridrl-best"), ("fixed", "tiny", "hybridrl-bf16"),
]
ORDER = ["matmul", "attention", "copies and indexing", "optimizer", "other elementwise ops"]


def floor(got: dict, shape: dict, cfg, peaks: dict) -> dict:
    """The profiled step's compute floor and its matmuls' achieved rate (module doc)."""
    flops = speed.step_flops(got, shape, cfg.shares_prompts)
    peak = peaks["bf16_gflops" if cfg.bf16 else "fp32_gflops"]
    return {"floor_s": (flops["train_executed"] + flops["rollout"]) / (peak * 1e9), "peak_gflops": peak,
            "matmul_gflops": got["matmul_flops"] / max(got["matmul_s"], 1e-9) / 1e9}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="steps before the profiled one (warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    a = p.parse_args()
    info = speed.machine()
    configs = {c.name: c for c in speed.CONFIGS}
    peaks = speed.measure_peaks(a.threads)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {kind: speed.build_models(kind, ["tiny", "small"], tmp) for kind in {w for w, _, _ in CASES}}
        for kind, model, name in CASES:
            if configs[name].bf16 and not peaks["fast_bf16"]:
                continue  # as in bench/speed.py: no bf16 rows where bf16 matmuls are emulated
            cfg, out = configs[name], os.path.join(tmp, f"{kind}-{model}-{name}.json")
            print(f"[{kind}/{model}] {name}", file=sys.stderr, flush=True)
            cmd = [sys.executable, os.path.join(HERE, "hybridrl_grpo.py"), "--model", models[kind][model]["path"],
                   "--steps", str(a.steps), "--threads", str(a.threads), "--out", os.path.join(tmp, "steps.jsonl"),
                   "--workload", kind, "--profile", out, *(["--bf16"] if cfg.bf16 else []), *cfg.overrides]
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
            got = json.load(open(out))
            results.append({"workload": kind, "model": model, "config": name, "label": cfg.label, **got,
                            **floor(got, models[kind][model], cfg, peaks)})
    lines = [f"CPU: {info['cpu_model']} ({info['cpu_count']} cores), kind **{info['kind']}**; "
             f"{a.threads} threads; one profiled step after {a.steps} warm-up steps per case.\n",
             "| workload | model | configuration | step wall s | " + " | ".join(ORDER) + " | outside ops | skipped "
             "| floor s | step / floor | matmul GFLOP/s (of peak) | matmul s / floor |",
             "|" + " --- |" * (len(ORDER) + 10)]
    for r in results:
        cats = " | ".join(f"{r['categories'].get(c, 0.0):.3f}" for c in ORDER)
        lines.append(f"| {r['workload']} | {r['model']} | {r['config']} | {r['wall_s']:.3f} | {cats} "
                     f"| {max(r['wall_s'] - r['in_ops_s'], 0.0):.3f} | {100 * r['skipped_frac']:.0f} % "
                     f"| {r['floor_s']:.3f} | {r['wall_s'] / r['floor_s']:.1f}x | {r['matmul_gflops']:.0f} "
                     f"({100 * r['matmul_gflops'] / r['peak_gflops']:.0f} %) | {r['matmul_s'] / r['floor_s']:.2f}x |")
    for r in results:
        top = ", ".join(f"`{o['op'].split('::')[-1]}` {o['self_s']:.3f} s ({o['calls']})" for o in r["top_ops"][:6])
        lines.append(f"\n{r['workload']}/{r['model']}/{r['config']}: {top}")
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    lines.append(f"\nSeconds are self time of the aten ops on the calling thread (calls in brackets). The floor is what "
                 f"the step computes (bench/speed.py's FLOPs: training as executed + rollout) at the measured matmul peak "
                 f"of its dtype ({peaks['fp32_gflops']:.0f} GFLOP/s fp32, {peaks['bf16_gflops']:.0f} bf16); the profiler "
                 f"slows the step a little, so bench/speed.py's step / floor is the one to quote. `matmul s / floor` "
                 f"is what the matmuls alone take, at the rate their kernels reach on these shapes (the profiler's "
                 f"FLOP count over their time): the step could not get closer to its floor than that if every other "
                 f"op and all the Python cost nothing. Command: `{command}`")
    table = "\n".join(lines) + "\n"
    os.makedirs(a.out_dir, exist_ok=True)
    stem = os.path.join(a.out_dir, f"profile-{info['kind']}")
    with open(stem + ".json", "w") as f:
        json.dump({"command": command, "machine": info, "peaks": peaks, "results": results}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
