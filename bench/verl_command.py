"""verl's GSM8K GRPO command (examples/gsm8k_verl_command/run.sh) on SmolLM2-135M with each scale lever
on and off: seconds per step, the trainer's peak RSS and the run's CPU time (issue #21).

    .venv/bin/python bench/verl_command.py                    # every row, about 30-60 min on 2 cores
    .venv/bin/python bench/verl_command.py --rows as-written plain --steps 2

Every row runs run.sh as written (packing and activation checkpointing on, fp32, the vLLM rollout when
installed) plus the same shortening overrides (SHORT: a batch sized for 2 cores, no validation, no
checkpoint) plus the row's own overrides, in a fresh process. It reads the run's metrics.jsonl: the median
`timing_s/step` and its phases over the steps after the first (which carries one-off warm-up), and the
trainer process's peak RSS (`perf/max_memory_allocated_gb`, the kernel's ru_maxrss of that process; vLLM's
engine is its own process and is not in it). Writes bench/results/verl_command.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import resource
import shlex
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

RUN_SH = os.path.join(ROOT, "examples", "gsm8k_verl_command", "run.sh")

# 4 prompts x 5 responses of at most 256 tokens, one optimizer step of 4 micro-batches of 5
SHORT = ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=5",
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5", "data.max_response_length=256",
         "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=0", "trainer.resume_mode=disable",
         "trainer.logger=[file]"]
OFF_PACK = ["actor_rollout_ref.model.use_remove_padding=false"]
OFF_CKPT = ["actor_rollout_ref.model.enable_gradient_checkpointing=false"]
ROWS = [
    ("as-written", "verl's command: packing + checkpointing, fp32", []),
    ("no-ckpt", "checkpointing off", OFF_CKPT),
    ("no-pack", "packing off (prompt sharing off too: it needs packing under checkpointing)",
     [*OFF_PACK, "actor_rollout_ref.model.share_prompt_prefix=false"]),
    ("plain", "packing and checkpointing off (padded, prompt sharing on)", [*OFF_PACK, *OFF_CKPT]),
    ("dynamic", "+ token-budget micro-batches (use_dynamic_bsz, 2048 tokens)",
     ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2048"]),
    ("bf16", "+ bf16 compute (fp32 masters), bf16 reference weights and bf16 rollout",
     ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
      "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", "actor_rollout_ref.rollout.dtype=bfloat16",
      "algorithm.rollout_correction.rollout_is=token"]),
]
PHASES = ("gen", "ref", "old_log_prob", "update_actor")


def run_row(overrides: list[str], run_dir: str, log: str) -> dict:
    """run.sh with the overrides in a fresh process; the metrics it logged and its CPU time (every process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(["bash", RUN_SH, *overrides, f"trainer.default_local_dir={run_dir}"], stdout=out,
                              stderr=subprocess.STDOUT, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        return {"error": open(log).read().strip().splitlines()[-1][:300]}
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps = [s for s in steps if "timing_s/step" in s]
    warm = steps[1:] or steps
    med = lambda key: statistics.median(s.get(key, 0.0) for s in warm)  # noqa: E731
    return {"step_s": med("timing_s/step"), **{p: med(f"timing_s/{p}") for p in PHASES},
            "peak_rss_gb": max(s["perf/max_memory_allocated_gb"] for s in steps),
            "response_length": med("response_length/mean"), "probs_diff_max": med("training/rollout_probs_diff_max"),
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "wall_s": time.perf_counter() - start, "steps": len(warm)}


def markdown(results: dict, command: str, engine: str, machine: dict) -> str:
    lines = [f"CPU: {machine['cpu_model']} ({machine['cpu_count']} cores; {', '.join(machine['cpu_flags'])}); "
             f"measured matmul peak {machine['fp32_gflops']:.0f} GFLOP/s fp32, {machine['bf16_gflops']:.0f} GFLOP/s bf16. "
             f"Rollout engine: {engine}. Medians over the steps after the first; peak RSS of the trainer process; "
             f"CPU-s of the whole run (every process, start-up included). Command: `{command}`", "",
             "| row | levers | s/step | generation s | reference s | π_old s | update s | trainer peak RSS GB "
             "| run CPU-s | mean response tokens |", "|" + " --- |" * 10]
    for name, label, _ in ROWS:
        r = results.get(name)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"| {name} | {label} | failed: {r['error']} |" + " |" * 7)
            continue
        lines.append(f"| {name} | {label} | {r['step_s']:.1f} | {r['gen']:.1f} | {r['ref']:.1f} | {r['old_log_prob']:.1f} "
                     f"| {r['update_actor']:.1f} | {r['peak_rss_gb']:.2f} | {r['cpu_s']:.0f} | {r['response_length']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="+", default=[r[0] for r in ROWS], choices=[r[0] for r in ROWS])
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    machine = machine_info(0)
    engine = "vllm" if importlib.util.find_spec("vllm") else "hf"
    extra = [f"trainer.total_training_steps={a.steps}"] + ([] if engine == "vllm" else ["actor_rollout_ref.rollout.name=hf"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, label, overrides in ROWS:
            if name in a.rows:
                results[name] = run_row([*SHORT, *extra, *overrides], os.path.join(tmp, name),
                                        os.path.join(tmp, f"{name}.log"))
                print(name, results[name], flush=True)
    command = "python bench/verl_command.py " + shlex.join(sys.argv[1:])
    table = markdown(results, command, engine, machine)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "verl_command.json"), "w") as f:
        json.dump({"command": command, "engine": engine, "machine": machine, "short": SHORT, "rows": {n: o for n, _, o in ROWS},
                   "date": datetime.datetime.now().isoformat(timespec="seconds"), "results": results}, f, indent=1)
    with open(os.path.join(HERE, "results", "verl_command.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
