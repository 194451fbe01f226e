"""Where a hybridrl GRPO step's time goes, by op category (torch.profiler), before and after the levers.

    .venv/bin/python bench/profile_steps.py            # about 3 minutes

For each case (a workload, a model and a configuration of bench/speed.py), one fresh process runs
`--steps` steps of bench/hybridrl_grpo.py and then profiles one more. The table gives that step's wall
time, the self time of its aten ops by category (matmuls, attention, copies and indexing, the
optimizer, other elementwise ops) and what was spent outside any op (Python and the framework's own
work), then each case's top ops. The learning workload's "small" model comes from bench/speed.py's
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

# each row names its dtype: `auto` precision (config/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import speed  # noqa: E402

CASES = [  # (workload, model, configuration of speed.CONFIGS): the levers off, then on one by one
    ("learning", "small", "hybridrl-like"), ("learning", "small", "hybridrl-share"),
    ("learning", "small", "hybridrl-best"), ("learning", "small", "hybridrl-bf16"),
    ("fixed", "small", "hybridrl-best"), ("fixed", "small", "hybridrl-bf16"),
]
ORDER = ["matmul", "attention", "copies and indexing", "optimizer", "other elementwise ops"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="steps before the profiled one (warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    a = p.parse_args()
    info = speed.machine()
    info["kind"] = speed.cpu_kind(info["cpu_flags"])
    configs = {c.name: c for c in speed.CONFIGS}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {kind: speed.build_models(kind, ["small"], tmp) for kind in {w for w, _, _ in CASES}}
        for kind, model, name in CASES:
            cfg, out = configs[name], os.path.join(tmp, f"{kind}-{model}-{name}.json")
            print(f"[{kind}/{model}] {name}", file=sys.stderr, flush=True)
            cmd = [sys.executable, os.path.join(HERE, "hybridrl_grpo.py"), "--model", models[kind][model]["path"],
                   "--steps", str(a.steps), "--threads", str(a.threads), "--out", os.path.join(tmp, "steps.jsonl"),
                   "--workload", kind, "--profile", out, *(["--bf16"] if cfg.bf16 else []), *cfg.overrides]
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
            results.append({"workload": kind, "model": model, "config": name, "label": cfg.label,
                            **json.load(open(out))})
    lines = [f"CPU: {info['cpu_model']} ({info['cpu_count']} cores), kind **{info['kind']}**; "
             f"{a.threads} threads; one profiled step after {a.steps} warm-up steps per case.\n",
             "| workload | model | configuration | step wall s | " + " | ".join(ORDER) + " | outside ops | skipped |",
             "|" + " --- |" * (len(ORDER) + 6)]
    for r in results:
        cats = " | ".join(f"{r['categories'].get(c, 0.0):.3f}" for c in ORDER)
        lines.append(f"| {r['workload']} | {r['model']} | {r['config']} | {r['wall_s']:.3f} | {cats} "
                     f"| {max(r['wall_s'] - r['in_ops_s'], 0.0):.3f} | {100 * r['skipped_frac']:.0f} % |")
    for r in results:
        top = ", ".join(f"`{o['op'].split('::')[-1]}` {o['self_s']:.3f} s ({o['calls']})" for o in r["top_ops"][:6])
        lines.append(f"\n{r['workload']}/{r['model']}/{r['config']}: {top}")
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    lines.append(f"\nSeconds are self time of the aten ops on the calling thread (calls in brackets). Command: `{command}`")
    table = "\n".join(lines) + "\n"
    os.makedirs(a.out_dir, exist_ok=True)
    stem = os.path.join(a.out_dir, f"profile-{info['kind']}")
    with open(stem + ".json", "w") as f:
        json.dump({"command": command, "machine": info, "results": results}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
