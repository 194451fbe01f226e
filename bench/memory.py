"""`hybridrl plan`'s memory estimate against the measured peak of real runs (issue #21).

    .venv/bin/python bench/memory.py                    # every configuration (about 30-60 min on 2 cores)
    .venv/bin/python bench/memory.py --only tiny small  # configurations whose name starts so

For each configuration (CONFIGS: a model, its data and the levers it turns on) this
- asks `hybridrl plan`'s estimate (plan/memory.py) for the same overrides, in-process;
- runs `hybridrl train` for a few steps, validation included (before the first step and after the
  last), in a fresh process of its own, and reads that process's peak resident set from the kernel
  (`getrusage(RUSAGE_CHILDREN).ru_maxrss` of a one-use wrapper process, so no other run's peak
  counts), and samples the whole process tree's RSS every 20 ms (psutil) for the summed peak of
  every process (scoring processes included);
- reports estimate / measured: the issue asks for every row within ±30 %.

Writes bench/results/memory.json (machine, versions, per-configuration figures, the estimate's parts,
commands) and bench/results/memory.md (the table, also printed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import workload  # noqa: E402

SMOLLM2 = os.environ.get("HYBRIDRL_SMOLLM2", os.path.join(ROOT, "models", "smollm2-135m-instruct"))
GSM8K_RAW = os.environ.get("HYBRIDRL_GSM8K", "/work/shared/data/gsm8k")
MIB, GIB = 2 ** 20, 2 ** 30

# every run: a few steps and one validation (the last step's), no checkpoint, no console lines; responses run to
# data.max_response_length (EOS ignored in training) and data.max_prompt_length is the longest prompt the run
# reads (set per run, see prompt_length), so the lengths the estimate assumes are reached
RUN = ["trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=0", "trainer.resume_mode=disable",
       "trainer.logger=[file]", "data.shuffle=false", "actor_rollout_ref.rollout.ignore_eos=true"]
CHECKPOINTING = ["actor_rollout_ref.model.enable_gradient_checkpointing=true"]
PACKING = ["actor_rollout_ref.model.use_remove_padding=true"]
BF16 = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", "actor_rollout_ref.rollout.dtype=bfloat16"]


def dynamic(tokens: int) -> list[str]:
    return ["actor_rollout_ref.actor.use_dynamic_bsz=true", f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tokens}"]


@dataclass(frozen=True)
class Config:
    name: str
    model: str  # "tiny" (bundled tiny-arith), "small" (bench/workload.py's shape, random init), "smollm2"
    label: str
    overrides: list[str] = field(default_factory=list)
    needs: str = ""  # a lever (LEVER_MODULES) whose implementation the row needs
    steps: int = 2  # training steps (the last one validates)


TINY = ["data.train_batch_size=32", "actor_rollout_ref.rollout.n=8", "data.val_max_samples=256"]
# the speed benchmark's step (4 prompts x 8 x 32 tokens), a micro-batch of 8, the reference for a KL loss
SMALL = ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=8", "data.max_response_length=32",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
         "actor_rollout_ref.actor.use_kl_loss=true", "data.val_max_samples=64"]
# NOTES.md's SmolLM2 run, shortened: 2 prompts x 4 x 64 tokens on GSM8K, 8 validation prompts
SMOL = ["data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "data.max_response_length=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "data.val_max_samples=8", "actor_rollout_ref.actor.use_kl_loss=true"]
CONFIGS = [
    Config("tiny", "tiny", "tiny-arith, 32 prompts x 8, micro-batch 128 (the defaults)", TINY),
    Config("tiny-micro32", "tiny", "tiny-arith, micro-batch 32, KL loss (reference)",
           [*TINY, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32", "actor_rollout_ref.actor.use_kl_loss=true"]),
    Config("tiny-packed", "tiny", "tiny-arith, packing", [*TINY, *PACKING]),
    Config("tiny-dynamic", "tiny", "tiny-arith, packing + token budgets of 1024", [*TINY, *PACKING, *dynamic(1024)]),
    Config("tiny-ckpt", "tiny", "tiny-arith, checkpointing + packing", [*TINY, *CHECKPOINTING, *PACKING], "checkpointing"),
    Config("small", "small", "bench small (25.7M), 4 x 8 x 32 tokens, KL loss", SMALL),
    Config("small-bf16", "small", "bench small, bf16 (compute, reference, rollout)", [*SMALL, *BF16], "bf16"),
    Config("small-ckpt", "small", "bench small, checkpointing + packing", [*SMALL, *CHECKPOINTING, *PACKING],
           "checkpointing"),
    Config("smollm2", "smollm2", "SmolLM2-135M, GSM8K, 2 x 4 x 64 tokens, KL loss", SMOL, steps=1),
    Config("smollm2-dynamic", "smollm2", "SmolLM2-135M, packing + token budgets of 512",
           [*SMOL, *PACKING, *dynamic(512)], steps=1),
    Config("smollm2-levers", "smollm2", "SmolLM2-135M, checkpointing + packing + bf16",
           [*SMOL, *CHECKPOINTING, *PACKING, *BF16], "bf16", steps=1),
]
LEVER_MODULES = {"checkpointing": "hybridrl.models.memory", "bf16": "hybridrl.models.precision"}


def lever_missing(cfg: Config) -> bool:
    """Whether the code this configuration measures is not in this checkout yet (its row is skipped, and said so)."""
    import importlib.util

    return bool(cfg.needs) and importlib.util.find_spec(LEVER_MODULES[cfg.needs]) is None


def prompt_length(overrides: list[str]) -> int:
    """The longest prompt (chat template applied) among the rows a run reads: data.train_max_samples training
    rows and data.val_max_samples validation rows, as the trainer tokenizes them."""
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.data.dataset import RLDataset
    from hybridrl.models.loading import load_tokenizer

    cfg = load_config(RLConfig, None, overrides)
    d = cfg.data
    tok = load_tokenizer(cfg.actor_rollout_ref.model.path)
    longest = 0
    for files, n in [(d.train_files, d.train_max_samples), (d.val_files, d.val_max_samples)]:
        if not files:
            continue
        data = RLDataset(files, tok, d.prompt_key, 10 ** 6, max_samples=n)
        longest = max(longest, max(len(r.prompt_ids) for r in data.records))
    return longest


def build_small(folder: str) -> str:
    """bench/workload.py's "small" model (random init, hybridrl's tokenizer), written once."""
    path = os.path.join(folder, "small")
    if not os.path.exists(os.path.join(path, "config.json")):
        from hybridrl.models.tiny import build_model, build_tokenizer

        tok = build_tokenizer()
        build_model(tok, seed=workload.SEED, **workload.MODELS["small"]).save_pretrained(path)
        tok.save_pretrained(path)
    return path


def data_files(folder: str) -> dict[str, tuple[str, str]]:
    """(train, val) parquet files per dataset, written with `hybridrl data` once."""
    out = {}
    for name, extra in [("arith", []), ("gsm8k", ["--input", GSM8K_RAW])]:
        target = os.path.join(folder, name)
        if not os.path.isdir(target):
            subprocess.run([sys.executable, "-m", "hybridrl", "data", "arithmetic" if name == "arith" else "gsm8k",
                            "--output", target, *extra], check=True, cwd=ROOT, capture_output=True)
        val = "val" if name == "arith" else "test"
        out[name] = (os.path.join(target, "train.parquet"), os.path.join(target, f"{val}.parquet"))
    return out


def model_overrides(cfg: Config, folder: str, data: dict[str, tuple[str, str]]) -> list[str]:
    path = {"tiny": "tiny-arith", "small": lambda: build_small(folder), "smollm2": SMOLLM2}[cfg.model]
    path = path() if callable(path) else path
    train, val = data["gsm8k" if cfg.model == "smollm2" else "arith"]
    reward = [] if cfg.model != "small" else [f"custom_reward_function.path={os.path.join(HERE, 'workload.py')}",
                                                 "custom_reward_function.name=compute_score"]
    return [f"actor_rollout_ref.model.path={path}", f"data.train_files=[{train}]", f"data.val_files=[{val}]", *reward]


def estimate(overrides: list[str]) -> dict:
    """`hybridrl plan`'s figures for these overrides: the peak, its pool and phase, and its parts."""
    from hybridrl.config.loader import load_config
    from hybridrl.plan.memory import estimate_memory
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import validate_rl_config

    cfg = load_config(RLConfig, None, overrides)
    (pool, *_) = estimate_memory(cfg, validate_rl_config(cfg)).pools
    return {"bytes": pool.peak_bytes, "phase": pool.peak_phase, "parts": pool.breakdown,
            "phases": {ph.name: pool.total(ph) for ph in pool.phases}}


def read_params(model: str) -> int:
    from hybridrl.plan.memory import read_model_dims

    return read_model_dims(model).params


WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); sys.exit(rc)")


def _pss(pid: int) -> int:
    """Proportional set size in bytes: the process's private pages plus its share of pages it shares with
    others (a forked scoring process shares the trainer's pages until either writes them)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))


def _sample_tree(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """The largest sum of PSS over the process tree under `pid` (the RAM the run holds), every 50 ms."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    while not stop.is_set():
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += _pss(p.pid)
                except (OSError, StopIteration):
                    pass
        except psutil.NoSuchProcess:
            break
        peak[0] = max(peak[0], total)
        time.sleep(0.05)


def measure(overrides: list[str], run_dir: str, log: str) -> dict:
    """Run `hybridrl train` in a fresh process; its kernel-reported peak RSS and the tree's sampled peak."""
    cmd = [sys.executable, "-m", "hybridrl", "train", *overrides, f"trainer.default_local_dir={run_dir}"]
    start = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *cmd], stdout=subprocess.PIPE, stderr=err, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": ROOT}, text=True)
        stop, tree = threading.Event(), [0]
        sampler = threading.Thread(target=_sample_tree, args=(proc.pid, stop, tree), daemon=True)
        sampler.start()
        out, _ = proc.communicate()
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}")
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    step_s = [s["timing_s/step"] for s in steps if "timing_s/step" in s]
    return {"peak_rss": int(out.strip().splitlines()[-1]), "tree_peak_pss": tree[0],
            "wall_s": time.perf_counter() - start, "step_s": step_s, "command": cmd}


RUNTIME = ("import resource, sys; import hybridrl.trainer.build, hybridrl.trainer.rl, hybridrl.cli; "
           "from transformers import Qwen2ForCausalLM; from hybridrl.models.loading import load_tokenizer; "
           "load_tokenizer(sys.argv[1]); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")


def runtime_rss(model: str) -> int:
    """Peak RSS of a process that imported what `hybridrl train` imports and loaded the model's tokenizer, no
    model: what plan/memory.py's RUNTIME_BYTES stands for."""
    out = subprocess.run([sys.executable, "-c", RUNTIME, model], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    return int(out.stdout.strip().splitlines()[-1])


def row_of(cfg: Config, est: dict, got: dict) -> dict:
    return {"name": cfg.name, "label": cfg.label, "estimate": est, **got,
            "ratio": est["bytes"] / got["peak_rss"]}


def markdown(rows: list[dict]) -> str:
    lines = ["| configuration | `plan` estimate | measured peak RSS | estimate / measured | estimate's peak phase |",
             "|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['estimate']['bytes'] / MIB:,.0f} MiB | {r['peak_rss'] / MIB:,.0f} MiB | "
                     f"{r['ratio']:.2f} | {r['estimate']['phase']} |")
    return "\n".join(lines) + "\n"


def machine() -> dict:
    import torch
    import transformers

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "ram_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=[], help="configurations named so, or so followed by -...")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "hybridrl-memory"),
                   help="models, data and run folders")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    data = data_files(a.work)
    rows = []
    runtime = {m: runtime_rss(p) for m, p in [("tiny", "tiny-arith"), ("smollm2", SMOLLM2)]}
    print("runtime RSS:", {m: f"{v / MIB:.0f} MiB" for m, v in runtime.items()}, flush=True)
    for cfg in CONFIGS:
        if a.only and not any(cfg.name == o or cfg.name.startswith(o + "-") for o in a.only):
            continue
        if lever_missing(cfg):
            print(f"{cfg.name}: skipped, this checkout has no {cfg.needs} yet", flush=True)
            continue
        overrides = [*RUN, *model_overrides(cfg, a.work, data), *cfg.overrides, f"trainer.total_training_steps={cfg.steps}"]
        train_rows = int(next(o for o in overrides if o.startswith("data.train_batch_size=")).split("=")[1]) * cfg.steps
        overrides.append(f"data.train_max_samples={train_rows}")
        overrides.append(f"data.max_prompt_length={prompt_length(overrides)}")
        est = estimate(overrides)
        got = measure(overrides, os.path.join(a.work, "runs", cfg.name), os.path.join(a.work, f"{cfg.name}.log"))
        rows.append(row_of(cfg, est, got))
        r = rows[-1]
        print(f"{cfg.name}: estimate {est['bytes'] / MIB:,.0f} MiB ({est['phase']}), measured "
              f"{r['peak_rss'] / MIB:,.0f} MiB (tree {r['tree_peak_pss'] / MIB:,.0f}), ratio {r['ratio']:.2f}",
              flush=True)
    table = markdown(rows)
    print(table)
    os.makedirs(a.out, exist_ok=True)
    suffix = "" if not a.only else "-partial"
    with open(os.path.join(a.out, f"memory{suffix}.json"), "w") as f:
        json.dump({"date": datetime.date.today().isoformat(), "machine": machine(), "command": sys.argv,
                   "runtime_rss": runtime, "rows": rows},
                  f, indent=1)
    with open(os.path.join(a.out, f"memory{suffix}.md"), "w") as f:
        f.write(table)


if __name__ == "__main__":
    main()
