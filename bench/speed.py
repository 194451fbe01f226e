"""GRPO speed, TRL's GRPOTrainer vs hybridrl, on one fixed workload (bench/workload.py), CPU, fp32.

    make bench                                   # = .venv/bin/python bench/speed.py
    .venv/bin/python bench/speed.py --quick --models tiny   # smoke test, about 2 minutes

Method, all in one invocation so that every figure shares the machine's state:
- builds the random-init models (hybridrl's tokenizer and Qwen2 builder) once, into a temp dir;
- measures this machine's matmul peak (fp32, and bf16 for reference) at the benchmark's thread count;
- for each model, runs the configurations (CONFIGS, TRL first: the reference) alternately,
  A B C A B C ..., `--rounds` times, each a fresh process of `--steps` steps; alternating spreads
  any drift of the machine (thermal, a neighbour's load) over all configurations alike;
- pools each configuration's steps over its rounds, drops the first steps of every run (warm-up:
  allocator, thread pools, lazy init) and reports medians: seconds and process CPU-seconds per
  step, generation and training shares, token rates, peak RSS, speed-ups over TRL and MFU.

Writes bench/results/speed.json (machine, versions, peaks, per-row statistics, raw step records,
command, date) and bench/results/speed.md (the table, also printed), and puts the table between
the `<!-- bench:start -->` and `<!-- bench:end -->` markers of README.md when it has them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import workload  # noqa: E402

TRL_PY = os.path.join(HERE, ".venv-trl", "bin", "python")
SEQS = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
SHARE_KEY = "actor_rollout_ref.model.share_prompt_prefix"
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Config:
    name: str
    label: str
    runner: str  # "trl" or "hybridrl"
    overrides: list[str] = field(default_factory=list)  # hybridrl config overrides: the levers
    needs: str = ""  # a module the row needs (skipped, and said so, when it is not installed)

    @property
    def shares_prompts(self) -> bool:
        """Whether each distinct prompt is computed once (hybridrl's default; TRL never does)."""
        if self.runner != "hybridrl":
            return False
        values = [o.split("=", 1)[1].lower() for o in self.overrides if o.startswith(SHARE_KEY + "=")]
        return not values or values[-1] == "true"


TARGETS = {"tiny": 2.0, "small": 3.0}  # the speed-up targets over TRL
LIKE = [f"{SHARE_KEY}=false", "actor_rollout_ref.rollout.lean_decode=false"]
CONFIGS = [  # the first row is the reference of every speed-up; each hybridrl row adds one lever
    Config("trl", "TRL GRPOTrainer", "trl"),
    Config("hybridrl-allpasses", "hybridrl, every pass (old log-probs and reference recomputed, as verl does)",
           "hybridrl", [*LIKE, "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.0"]),
    Config("hybridrl-like", "hybridrl, like-for-like (hf rollout, fp32, only the passes GRPO needs)", "hybridrl",
           LIKE),
    Config("hybridrl-lean", "+ lean decode steps (rollout.lean_decode)", "hybridrl", [f"{SHARE_KEY}=false"]),
    Config("hybridrl-best", "+ prompt-prefix sharing = hybridrl's defaults (best)", "hybridrl"),
    Config("hybridrl-vllm", "hybridrl defaults with the vLLM rollout (fp32; CPU-s omit its engine process)", "hybridrl",
           ["actor_rollout_ref.rollout.name=vllm"], needs="vllm"),
]


def build_models(names: list[str], folder: str) -> dict[str, dict]:
    """Write each model with the tokenizer; return its folder and what FLOP counting needs."""
    from hybridrl.models.flops import attention_width, matmul_params
    from hybridrl.models.tiny import build_model, build_tokenizer

    tok = build_tokenizer()
    models = {}
    for name in names:
        model = build_model(tok, seed=workload.SEED, **workload.MODELS[name])
        path = os.path.join(folder, name)
        model.save_pretrained(path)
        tok.save_pretrained(path)
        models[name] = {"path": path, "params": sum(p.numel() for p in model.parameters()),
                        "n_matmul": matmul_params(model), "n_layers": model.config.num_hidden_layers,
                        "width": attention_width(model.config), **workload.MODELS[name]}
    return models


def measure_peaks(threads: int) -> dict[str, float]:
    """Matmul GFLOP/s at the runs' thread count. bf16 runs at well under 1 GFLOP/s on a CPU
    without AVX512-BF16/AMX, so its matrices are kept small (well under a second)."""
    from hybridrl.models.flops import measured_peak_flops

    torch.set_num_threads(threads)
    return {"fp32_gflops": measured_peak_flops("cpu", torch.float32) / 1e9,
            "bf16_gflops": measured_peak_flops("cpu", torch.bfloat16, size=256) / 1e9}


def machine() -> dict:
    cpuinfo = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    name = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    flags = sorted(set(re.findall(r"\b(avx512\w*|avx2|avx_vnni\w*|amx\w*)\b", cpuinfo)))
    import transformers

    trl = subprocess.run([TRL_PY, "-c", "import json, torch, transformers, trl; print(json.dumps({'trl': "
                          "trl.__version__, 'transformers': transformers.__version__, 'torch': torch.__version__}))"],
                         capture_output=True, text=True, check=True)
    return {"processor": platform.processor(), "cpu_model": name.group(1) if name else "",
            "cpu_count": os.cpu_count(), "cpu_flags": flags, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "trl_venv": json.loads(trl.stdout)}


def run(cfg: Config, model: str, steps: int, threads: int, out: str, log: str) -> list[dict]:
    """One fresh process of `steps` steps; its step records. Exits with the log's tail on failure."""
    script = os.path.join(HERE, f"{cfg.runner}_grpo.py")
    python = TRL_PY if cfg.runner == "trl" else sys.executable
    args = [python, script, "--model", model, "--steps", str(steps), "--threads", str(threads), "--out", out,
            *cfg.overrides]
    with open(log, "w") as f:
        done = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode:
        tail = open(log).read().splitlines()[-40:]
        sys.exit(f"{cfg.name} on {model} failed (exit {done.returncode}); {log} ends:\n" + "\n".join(tail))
    # Another process on the cores slows a multi-threaded run several-fold (its threads wait on each other):
    # the load average at the end of each run tells such runs apart in speed.json.
    load = os.getloadavg()[0]
    return [{**json.loads(line), "load_1m": load} for line in open(out)]


def step_flops(rec: dict, shape: dict, shares: bool) -> dict[str, float]:
    """Model FLOPs of one step's training pass (all 32 sequences in full, and what was computed:
    each prompt once with sharing) and of its rollout (prefill + one forward per generated token)."""
    from hybridrl.models.flops import shared_prompt_training_flops, training_flops

    dims = (shape["n_matmul"], shape["n_layers"], shape["width"])
    seq = rec["train_tokens"] / SEQS  # all sequences share one length: fixed-size prompts, NEW_TOKENS replies
    prompt = seq - workload.NEW_TOKENS
    nominal = training_flops(torch.full((SEQS,), seq), *dims)
    executed = nominal
    if shares:
        group = torch.arange(workload.PROMPTS_PER_STEP).repeat_interleave(workload.SAMPLES_PER_PROMPT)
        executed = shared_prompt_training_flops(torch.full((SEQS,), prompt), torch.full((SEQS,), workload.NEW_TOKENS),
                                                group, *dims)
    prefilled = prompt * (workload.PROMPTS_PER_STEP if shares else SEQS)
    return {"train_nominal": nominal, "train_executed": executed,
            "rollout": 2 * shape["n_matmul"] * (rec["gen_tokens"] + prefilled)}


def summarize(records: list[dict], shape: dict, shares: bool, peak_flops: float) -> dict:
    med = lambda values: statistics.median(list(values))  # noqa: E731
    train_s, gen_s = med(r["train_s"] for r in records), med(r["gen_s"] for r in records)
    flops = [step_flops(r, shape, shares) for r in records]
    mfu = lambda key, seconds: med(f[key] for f in flops) / seconds / peak_flops  # noqa: E731
    return {
        "steps": len(records), "step_s": med(r["step_s"] for r in records), "cpu_s": med(r["cpu_s"] for r in records),
        "gen_s": gen_s, "rollout_s": med(r["rollout_s"] for r in records), "train_s": train_s,
        "gen_tok_s": med(r["gen_tokens"] / r["gen_s"] for r in records),
        "train_tok_s": med(r["train_tokens"] / r["train_s"] for r in records),
        "peak_rss_gb": max(r["peak_rss_gb"] for r in records),
        # train_s is the whole step past the rollout (hybridrl's log-prob pass included), while the
        # FLOPs are those of one forward + backward: the MFU of the training share, a lower bound.
        "mfu_train_nominal": mfu("train_nominal", train_s), "mfu_train_executed": mfu("train_executed", train_s),
        "mfu_rollout": mfu("rollout", gen_s),
        # what the step computes (training as executed + rollout): at the measured peak, the floor of s/step
        "gflop_step": med(f["train_executed"] + f["rollout"] for f in flops) / 1e9,
    }


def add_speedups(rows: list[dict]) -> None:
    for row in rows:
        ref = next((r for r in rows if r["model"] == row["model"] and r["config"] == CONFIGS[0].name), None)
        row["speedup"] = ref["step_s"] / row["step_s"] if ref else None
        row["cpu_speedup"] = ref["cpu_s"] / row["cpu_s"] if ref else None


def markdown(rows: list[dict], models: dict, peaks: dict, command: str) -> str:
    x = lambda v: f"{v:.2f}x" if v is not None else "n/a"  # noqa: E731
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    header = ("| model | configuration | s/step (median) | speed-up vs TRL | CPU-s/step | CPU speed-up | generation s "
              "| training s | generated tok/s | trained tok/s | training MFU (nominal / executed) | rollout MFU "
              "| peak RSS GB |")
    lines = [header, "|" + " --- |" * header.count(" | ") + " --- |"]
    for r in rows:
        lines.append(
            f"| {r['model']} ({models[r['model']]['params'] / 1e6:.1f}M) | {r['label']} | {r['step_s']:.2f} "
            f"| {x(r['speedup'])} | {r['cpu_s']:.2f} | {x(r['cpu_speedup'])} | {r['gen_s']:.2f} | {r['train_s']:.2f} "
            f"| {r['gen_tok_s']:.0f} | {r['train_tok_s']:.0f} | {pct(r['mfu_train_nominal'])} / "
            f"{pct(r['mfu_train_executed'])} | {pct(r['mfu_rollout'])} | {r['peak_rss_gb']:.2f} |")
    for model, target in TARGETS.items():
        ref = next((r for r in rows if r["model"] == model and r["config"] == CONFIGS[0].name), None)
        best = min((r for r in rows if r["model"] == model and r["config"] != CONFIGS[0].name),
                   key=lambda r: r["step_s"], default=None)
        if ref and best:
            lines.append(
                f"\n{model}: the {target:g}x target is {ref['step_s'] / target:.2f} s/step; the fastest hybridrl row "
                f"({best['config']}) computes {best['gflop_step']:.0f} GFLOP per step, at least "
                f"{best['gflop_step'] / peaks['fp32_gflops']:.2f} s at the measured fp32 peak, and took "
                f"{best['step_s']:.2f} s ({best['speedup']:.2f}x).")
    lines.append(f"\nMeasured matmul peak: {peaks['fp32_gflops']:.1f} GFLOP/s fp32, {peaks['bf16_gflops']:.2f} "
                 f"GFLOP/s bf16. Command: `{command}`")
    return "\n".join(lines) + "\n"


def update_readme(table: str) -> None:
    path = os.path.join(ROOT, "README.md")
    text = open(path).read()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return  # no markers: the README is not ours to restructure
    with open(path, "w") as f:
        f.write(text[:start + len(README_START)] + "\n" + table + text[end:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--models", default="tiny,small")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    p.add_argument("--quick", action="store_true", help="smoke test: 3 steps, 1 round, 1 warm-up step dropped")
    p.add_argument("--configs", default=",".join(c.name for c in CONFIGS))
    a = p.parse_args()
    steps, rounds, warmup = (3, 1, 1) if a.quick else (a.steps, a.rounds, 2)
    names = a.models.split(",")
    configs = [c for c in CONFIGS if c.name in a.configs.split(",")]
    missing = [c for c in configs if c.needs and importlib.util.find_spec(c.needs) is None]
    for c in missing:
        print(f"skipping {c.name}: {c.needs} is not installed (make vllm)", file=sys.stderr)
    configs = [c for c in configs if c not in missing]
    unknown = set(a.configs.split(",")) - {c.name for c in CONFIGS} | set(names) - set(workload.MODELS)
    if unknown:
        p.error(f"unknown model or config: {', '.join(sorted(unknown))}")
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    os.makedirs(a.out_dir, exist_ok=True)

    info = machine()
    peaks = measure_peaks(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(names, tmp)
        for name in names:
            pooled: dict[str, list[dict]] = {c.name: [] for c in configs}
            for i in range(rounds):
                for cfg in configs:  # alternate: A B C A B C ...
                    print(f"[{name}] round {i + 1}/{rounds}: {cfg.name}", file=sys.stderr, flush=True)
                    out = os.path.join(tmp, f"{name}-{cfg.name}-{i}.jsonl")
                    log = os.path.join(tmp, f"{name}-{cfg.name}-{i}.log")
                    pooled[cfg.name] += run(cfg, models[name]["path"], steps, a.threads, out, log)[warmup:]
            for cfg in configs:
                stats = summarize(pooled[cfg.name], models[name], cfg.shares_prompts, peaks["fp32_gflops"] * 1e9)
                rows.append({"model": name, "config": cfg.name, "label": cfg.label, "overrides": cfg.overrides,
                             **stats, "records": pooled[cfg.name]})
    add_speedups(rows)

    table = markdown(rows, models, peaks, command)
    for m in models.values():
        del m["path"]  # a deleted temp dir
    result = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "command": command,
              "steps": steps, "rounds": rounds, "warmup_steps_dropped": warmup, "threads": a.threads,
              "workload": {"prompts_per_step": workload.PROMPTS_PER_STEP,
                           "samples_per_prompt": workload.SAMPLES_PER_PROMPT, "new_tokens": workload.NEW_TOKENS,
                           "lr": workload.LR, "seed": workload.SEED},
              "machine": info, "peaks": peaks, "models": models, "rows": rows}
    with open(os.path.join(a.out_dir, "speed.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(a.out_dir, "speed.md"), "w") as f:
        f.write(table)
    update_readme(table)
    print(table)


if __name__ == "__main__":
    main()
