"""What each scale lever costs and saves: the training passes of one GRPO step on a variable-length batch.

    .venv/bin/python bench/levers.py                      # tiny and small, every lever (part of `make bench`)
    .venv/bin/python bench/levers.py --models smollm2 --steps 3

The workload looks like GSM8K on a small model: `--prompts` prompts x `--n` responses, prompt lengths
uniform in [P/4, P] and response lengths uniform in [8, T] (seeded), advantages of unit size. Each lever row
builds the policy (and the reference, for the KL loss) with hybridrl's own builder from the same config a
training run would use plus that row's overrides, then times `--steps` steps of: reference log-probs, the
policy's π_old log-prob pass, and one update (forward + backward + AdamW). Every row runs in a fresh
process, so its peak RSS is its own; rows alternate over `--rounds` rounds and the medians are reported.
Levers: activation checkpointing, padding-free packing (with and without prompt sharing), token-budget
micro-batches, bf16 compute (rows marked n/a where `hybridrl doctor`'s check finds no fast bf16).

Writes bench/results/levers.{json,md}; the CPU kind (flags, measured fp32/bf16 matmul peaks) is in both.
"""

from __future__ import annotations

import argparse
import datetime
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
import workload  # noqa: E402

MODELS = {"tiny": "bench", "small": "bench", "smollm2": os.path.join(ROOT, "models", "smollm2-135m-instruct")}
BF16 = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16"]
ROWS = [  # (name, label, overrides); every row keeps the base config's sizes
    ("plain", "padded rows, fixed micro-batches, fp32 (prompt sharing off)",
     ["actor_rollout_ref.model.share_prompt_prefix=false"]),
    ("share", "+ prompt-prefix sharing (hybridrl's default)", []),
    ("ckpt", "+ activation checkpointing (needs packing for sharing: see below)",
     ["actor_rollout_ref.model.share_prompt_prefix=false", "actor_rollout_ref.model.enable_gradient_checkpointing=true"]),
    ("pack", "padding-free packing, no sharing", ["actor_rollout_ref.model.share_prompt_prefix=false",
                                                  "actor_rollout_ref.model.use_remove_padding=true"]),
    ("pack-share", "padding-free packing + prompt sharing", ["actor_rollout_ref.model.use_remove_padding=true"]),
    ("pack-share-ckpt", "packing + sharing + checkpointing", ["actor_rollout_ref.model.use_remove_padding=true",
                                                              "actor_rollout_ref.model.enable_gradient_checkpointing=true"]),
    ("dynamic", "packing + sharing + token-budget micro-batches", ["actor_rollout_ref.model.use_remove_padding=true",
                                                                   "actor_rollout_ref.actor.use_dynamic_bsz=true"]),
    ("bf16", "packing + sharing + bf16 compute (fp32 masters) and a bf16 reference",
     ["actor_rollout_ref.model.use_remove_padding=true", *BF16]),
]


def lengths(prompts: int, n: int, P: int, T: int, seed: int = 0) -> list[tuple[int, list[int]]]:
    """(prompt length, [response lengths]) per prompt."""
    import random

    rng = random.Random(seed)
    return [(rng.randint(max(1, P // 4), P), [rng.randint(8, T) for _ in range(n)]) for _ in range(prompts)]


def make_batch(vocab: int, shape: list[tuple[int, list[int]]], P: int, T: int):
    """A TrainBatch: prompts left-padded to P, responses right-padded to T, random tokens (ids >= 3)."""
    import torch

    from hybridrl.batch import Sequences, TrainBatch

    g = torch.Generator().manual_seed(1)
    ids, attn, mask = [], [], []
    for p, rs in shape:
        prompt = torch.randint(3, vocab, (p,), generator=g)
        for r in rs:
            resp = torch.randint(3, vocab, (T,), generator=g)
            live = (torch.arange(T) < r).long()
            ids.append(torch.cat([torch.zeros(P - p, dtype=torch.long), prompt, resp * live]))
            attn.append(torch.cat([torch.zeros(P - p, dtype=torch.long), torch.ones(p, dtype=torch.long), live]))
            mask.append(live)
    ids, attn, mask = torch.stack(ids), torch.stack(attn), torch.stack(mask)
    adv = torch.randn(len(ids), 1, generator=g).expand(-1, T) * mask
    zeros = torch.zeros(len(ids), T)
    return TrainBatch(Sequences(ids, attn, mask), adv, zeros, None, None)


def base_overrides(model: str, a: argparse.Namespace) -> list[str]:
    rows = a.prompts * a.n
    return [f"actor_rollout_ref.model.path={model}", f"data.max_prompt_length={a.P}", f"data.max_response_length={a.T}",
            f"data.train_batch_size={a.prompts}", f"actor_rollout_ref.rollout.n={a.n}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={a.prompts}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={a.micro or rows}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={a.micro or rows}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={a.micro or rows}",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={a.budget or (a.P + a.T) * max(1, (a.micro or rows) // 2)}",
            "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.optim.lr=1e-6",
            "trainer.logger=[]", "data.val_files=[]"]


def child(a: argparse.Namespace) -> None:
    """One row in this process: JSON lines of per-step timings to --out."""
    import torch

    from hybridrl.batch import TrainBatch
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import validate_rl_config
    from hybridrl.models.loading import load_tokenizer
    from hybridrl.workers.build import build_policy, build_reference

    torch.set_num_threads(a.threads or torch.get_num_threads())
    cfg = load_config(RLConfig, None, base_overrides(a.model, a) + a.overrides)
    plan = validate_rl_config(cfg)
    tok = load_tokenizer(cfg.actor_rollout_ref.model.path)
    policy = build_policy(cfg, plan, tok, total=a.steps)
    reference = build_reference(cfg, policy)
    batch = make_batch(policy.module.config.vocab_size, lengths(a.prompts, a.n, a.P, a.T), a.P, a.T)
    with open(a.out, "w") as out:
        for _ in range(a.steps):
            wall, cpu = time.perf_counter(), time.process_time()
            ref = reference.log_probs(batch.seqs)
            t_ref = time.perf_counter()
            old = policy.log_probs(batch.seqs)
            t_old = time.perf_counter()
            policy.update(TrainBatch(batch.seqs, batch.advantages, old, old, ref))
            end = time.perf_counter()
            out.write(json.dumps({"step_s": end - wall, "cpu_s": time.process_time() - cpu, "ref_s": t_ref - wall,
                                  "old_s": t_old - t_ref, "update_s": end - t_old,
                                  "tokens": int(batch.seqs.attention_mask.sum()),
                                  "padded_tokens": batch.seqs.attention_mask.numel(),
                                  "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}) + "\n")
            out.flush()


def run_row(model: str, overrides: list[str], a: argparse.Namespace, out: str) -> list[dict]:
    args = [sys.executable, __file__, "--child", "--model", model, "--out", out, "--steps", str(a.steps),
            "--prompts", str(a.prompts), "--n", str(a.n), "--P", str(a.P), "--T", str(a.T),
            "--micro", str(a.micro), "--budget", str(a.budget), "--threads", str(a.threads), "--", *overrides]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return [{"error": (done.stderr or done.stdout).strip().splitlines()[-1][:300]}]
    return [json.loads(line) for line in open(out)]


def summarize(records: list[dict]) -> dict:
    if any("error" in r for r in records):
        return {"error": next(r["error"] for r in records if "error" in r)}
    warm = records[1:] or records  # the first step of a process carries one-off warm-up
    med = lambda k: statistics.median(r[k] for r in warm)  # noqa: E731
    return {"step_s": med("step_s"), "cpu_s": med("cpu_s"), "ref_s": med("ref_s"), "old_s": med("old_s"),
            "update_s": med("update_s"), "peak_rss_gb": max(r["peak_rss_gb"] for r in records),
            "tokens": records[0]["tokens"], "padded_tokens": records[0]["padded_tokens"], "steps": len(warm)}


def markdown(results: dict, machine: dict, a: argparse.Namespace, command: str) -> str:
    lines = [f"CPU: {machine['cpu_model']} ({machine['cpu_count']} cores; {', '.join(machine['cpu_flags'])}); measured "
             f"matmul peak {machine['fp32_gflops']:.0f} GFLOP/s fp32, {machine['bf16_gflops']:.0f} GFLOP/s bf16 "
             f"(fast bf16: {'yes' if machine['fast_bf16'] else 'no'}). Workload: {a.prompts} prompts x {a.n} "
             f"responses, prompts {a.P // 4}-{a.P} and responses 8-{a.T} tokens; one step = reference log-probs + "
             f"π_old log-probs + one update. Medians of {a.rounds} round(s) x {a.steps} steps (first step of each "
             f"process dropped). Command: `{command}`", "",
             "| model | lever | s/step | CPU-s/step | reference s | π_old s | update s | peak RSS GB | vs plain |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, rows in results.items():
        base = rows.get("plain", {}).get("step_s")
        for name, label, _ in ROWS:
            r = rows.get(name)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {model} | {label} | n/a: {r['error']} | | | | | | |")
                continue
            speed = f"{base / r['step_s']:.2f}x" if base else ""
            lines.append(f"| {model} | {label} | {r['step_s']:.2f} | {r['cpu_s']:.2f} | {r['ref_s']:.2f} | "
                         f"{r['old_s']:.2f} | {r['update_s']:.2f} | {r['peak_rss_gb']:.2f} | {speed} |")
    return "\n".join(lines) + "\n"


def machine_info(threads: int) -> dict:
    import platform
    import re

    import torch

    from hybridrl.models.flops import measured_peak_flops

    torch.set_num_threads(threads or torch.get_num_threads())
    cpuinfo = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    name = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    flags = sorted(set(re.findall(r"\b(avx512_bf16|avx512f|avx2|amx_bf16)\b", cpuinfo)))
    fp32 = measured_peak_flops("cpu", torch.float32) / 1e9
    bf16 = measured_peak_flops("cpu", torch.bfloat16, size=256 if "avx512_bf16" not in flags else 1024) / 1e9
    return {"cpu_model": name.group(1) if name else platform.processor(), "cpu_count": os.cpu_count(),
            "cpu_flags": flags, "fp32_gflops": fp32, "bf16_gflops": bf16, "fast_bf16": bf16 > fp32,
            "torch": torch.__version__}


def build_bench_models(names: list[str], folder: str) -> dict[str, str]:
    """The bench's random-init tiny/small models (workload.MODELS); smollm2 is `make smollm2`'s folder."""
    from hybridrl.models.tiny import build_model, build_tokenizer

    paths, tok = {}, None
    for name in names:
        if MODELS[name] != "bench":
            paths[name] = MODELS[name]
            continue
        tok = tok or build_tokenizer()
        path = os.path.join(folder, name)
        build_model(tok, seed=workload.SEED, **workload.MODELS[name]).save_pretrained(path)
        tok.save_pretrained(path)
        paths[name] = path
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "small"], choices=list(MODELS))
    p.add_argument("--rows", nargs="+", default=[r[0] for r in ROWS], choices=[r[0] for r in ROWS])
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--P", type=int, default=96, help="longest prompt (tokens); P + T within the bench models' 256 positions")
    p.add_argument("--T", type=int, default=160, help="longest response (tokens)")
    p.add_argument("--micro", type=int, default=0, help="responses per micro-batch (0: the whole mini-batch)")
    p.add_argument("--budget", type=int, default=0, help="dynamic rows' token budget (0: half the padded micro-batch)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)
    machine = machine_info(a.threads)
    command = "python bench/levers.py " + shlex.join(sys.argv[1:])
    rows = [r for r in ROWS if r[0] in a.rows]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = build_bench_models(a.models, tmp)
        records: dict[tuple[str, str], list[dict]] = {}
        for _ in range(a.rounds):
            for model in a.models:
                for name, label, overrides in rows:
                    if name == "bf16" and not machine["fast_bf16"]:
                        records[(model, name)] = [{"error": "this CPU has no fast bf16 (see hybridrl doctor)"}]
                        continue
                    out = os.path.join(tmp, f"{model}-{name}.jsonl")
                    records.setdefault((model, name), []).extend(run_row(paths[model], overrides, a, out))
                    print(f"{model} {name}: {summarize(records[(model, name)])}", flush=True)
        for (model, name), recs in records.items():
            results.setdefault(model, {})[name] = summarize(recs)
    table = markdown(results, machine, a, command)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "levers.json"), "w") as f:
        json.dump({"machine": machine, "command": command, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                   "results": results}, f, indent=1)
    with open(os.path.join(HERE, "results", "levers.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
