"""The hf engine's lean decode in bf16 (issue #23): where a decode step's time goes, and the attention levers
measured back to back against the fp32 path, on both workloads' generation (tiny and small models).

    .venv/bin/python bench/decode_bf16.py --rounds 7            # about 5 minutes on 2 shared cores

Variants of rollout/decode.LeanDecoder (the weights' dtype / KV cache and attention dtype / attention kernel):
- fp32 sdpa: fp32 before this change (SDPA on the cache);         fp32 bmm: fp32 now (two batched matmuls);
- bf16 sdpa: bf16 before (bf16 weights, bf16 cache, SDPA);         bf16 kv32-sdpa: lever (a) alone;
- bf16 bmm: lever (c) alone (bf16 cache, batched matmuls);         bf16 kv32-bmm: both = bf16 now.
Each round runs every variant once on the same prompts and keys (the fixed order rotates each round), one
engine.generate of 4 prompts x 8 samples x up to 32 tokens; the medians of wall and process CPU seconds over
rounds are reported (the first round is warm-up). `--profile` adds one profiled decode per variant of the
fixed small model: per decode step, ms in projections, attention, casts, other ops, and outside ops (Python).
Writes bench/results/decode-bf16-<cpu kind>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import speed  # noqa: E402
import workload  # noqa: E402

from hybridrl.models.precision import Precision  # noqa: E402
from hybridrl.rollout import decode  # noqa: E402
from hybridrl.rollout.base import SamplingParams  # noqa: E402
from hybridrl.rollout.hf import HFRolloutEngine, choose_tokens  # noqa: E402

FP32, BF16 = torch.float32, torch.bfloat16
VARIANTS = {  # name: (precision, KV cache / attention dtype (None: the weights'), SDPA instead of the bmm attention,
    #                   oneDNN-prepacked projections)
    "fp32 sdpa": ("fp32", FP32, True, False), "fp32 bmm": ("fp32", FP32, False, False),
    "bf16 sdpa": ("bf16", None, True, False), "bf16 kv32-sdpa": ("bf16", FP32, True, False),
    "bf16 bmm": ("bf16", None, False, False), "bf16 kv32-bmm": ("bf16", FP32, False, False),
    "fp32 bmm packed": ("fp32", FP32, False, True), "bf16 kv32-bmm packed": ("bf16", FP32, False, True),
}
ATTENTION = [v for v in VARIANTS if not VARIANTS[v][3]]  # the attention comparison (the default --variants)
PACKING = ["fp32 bmm", "fp32 bmm packed", "bf16 kv32-bmm", "bf16 kv32-bmm packed"]  # --variants packing
CATEGORIES = [  # (category, op-name fragments), first match wins
    ("attention", ("scaled_dot_product", "flash", "bmm", "softmax")),
    ("projections", ("addmm", "mm", "linear")),
    ("casts and copies", ("copy", "_to_copy", "clone", "cat")),
]


class SdpaDecoder(decode.LeanDecoder):
    """The decoder with torch's SDPA on the cache slice, as before this change."""

    def _attend(self, q, layer, S, bias):
        N, K = len(q), self.n_kv
        mask = bias.view(N, K, 1, S)[:, :1]  # the additive mask [N, 1, 1, S]
        att = F.scaled_dot_product_attention(q[:, :, None], self.keys[layer][:, :, :S], self.values[layer][:, :, :S],
                                             attn_mask=mask, enable_gqa=self.n_heads != K)  # [N, H, 1, D]
        return att.reshape(N, -1)


def engine_for(model, tok, variant: str) -> HFRolloutEngine:
    precision, kv, sdpa, packed = VARIANTS[variant]
    engine = HFRolloutEngine(model, [tok.eos_token_id], tok.pad_token_id, precision=Precision.of(precision))
    cls = SdpaDecoder if sdpa else decode.LeanDecoder
    # the engine builds its decoder through decode.LeanDecoder; each generate call points it at this variant's
    engine.decoder_class = lambda module, n, length, dtype, **_: cls(module, n, length, dtype, kv_dtype=kv,
                                                                     pack_after=0 if packed else None)
    return engine


def generate(engine, ids, mask, sampling):
    original = decode.LeanDecoder
    decode.LeanDecoder = engine.decoder_class
    try:
        return engine.generate_keyed(ids, mask, sampling, torch.arange(len(ids)))
    finally:
        decode.LeanDecoder = original


def prompts(tok, kind: str):
    rows = [tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False)["input_ids"] for q, _ in workload.workload_prompts(kind, workload.PROMPTS_PER_STEP)]
    width, n = max(map(len, rows)), workload.SAMPLES_PER_PROMPT
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows]).repeat_interleave(n, 0)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]).repeat_interleave(n, 0)
    return ids, mask


def time_variants(model, tok, kind: str, rounds: int, variants: list[str]) -> dict[str, dict]:
    ids, mask = prompts(tok, kind)
    sampling = SamplingParams(max_new_tokens=workload.NEW_TOKENS, temperature=1.0, ignore_eos=kind == "fixed")
    engines = {v: engine_for(model, tok, v) for v in variants}
    names, seen = list(variants), {v: [] for v in variants}
    for r in range(rounds + 1):
        for v in names[r % len(names):] + names[:r % len(names)]:  # rotate the order: no variant always runs first
            wall, cpu = time.perf_counter(), time.process_time()
            out = generate(engines[v], ids, mask, sampling)
            if r > 0:
                seen[v].append((time.perf_counter() - wall, time.process_time() - cpu, int(out.response_mask.sum())))
    return {v: {"wall_s": statistics.median(s[0] for s in runs), "cpu_s": statistics.median(s[1] for s in runs),
                "tokens": runs[-1][2]} for v, runs in seen.items()}


def profile_decode(model, tok, variant: str) -> dict[str, float]:
    """ms per decode step by category over one generation's decode steps (prefill and sampling apart)."""
    from torch.profiler import ProfilerActivity, profile

    engine = engine_for(model, tok, variant)
    ids, mask = prompts(tok, "fixed")
    T = workload.NEW_TOKENS
    sampling = SamplingParams(max_new_tokens=T, temperature=1.0, ignore_eos=True)
    generate(engine, ids, mask, sampling)  # warm-up
    with engine.precision.autocast(), torch.no_grad():
        logits, cache = engine._prefill(ids, mask)
        P = ids.shape[1]
        attn = torch.cat([mask, torch.ones(len(ids), T, dtype=mask.dtype)], 1)
        lean = engine.decoder_class(model, len(ids), P + T, engine.precision.compute if engine.precision.mixed else None)
        for i, layer in enumerate(cache.layers):
            lean.fill(i, layer.keys, layer.values)
        pos = attn[:, :P].sum(1)
        u = torch.rand(len(ids))
        tok_ = choose_tokens(logits, sampling, u)[0]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall = time.perf_counter()
            for t in range(T - 1):
                logits = lean.step(tok_, pos + t, P + t, attn[:, :P + t + 1].bool())
            wall = time.perf_counter() - wall
        sampling_s = time.perf_counter()
        for t in range(T - 1):
            choose_tokens(logits, sampling, u)
        sampling_s = time.perf_counter() - sampling_s
    per_step = {"sampling": 1e3 * sampling_s / (T - 1), "total decode step": 1e3 * wall / (T - 1), "in ops": 0.0}
    for e in prof.key_averages():
        if e.key.startswith(("aten::", "mkldnn::")):  # mkldnn::_linear_pointwise: the packed projections
            name = e.key.split("::")[-1]
            cat = next((c for c, parts in CATEGORIES if any(p in name for p in parts)), "other ops")
            per_step[cat] = per_step.get(cat, 0.0) + e.self_cpu_time_total / 1e3 / (T - 1)
            per_step["in ops"] += e.self_cpu_time_total / 1e3 / (T - 1)
    return per_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per model (after one warm-up round)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--cases", default="fixed:tiny,fixed:small,learning:tiny,learning:small",
                   help="workload:model pairs to time")
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    p.add_argument("--variants", choices=["attention", "packing"], default="attention",
                   help="attention: the bf16 attention levers (decode-bf16-<kind>); packing: oneDNN-prepacked "
                        "projections against plain ones, fp32 and bf16 (decode-packing-<kind>)")
    a = p.parse_args()
    variants = ATTENTION if a.variants == "attention" else PACKING
    peaks = speed.measure_peaks(a.threads)
    if not peaks["fast_bf16"]:  # as bench/speed.py: bf16 emulated (no AVX512-BF16, or capped)
        variants = [v for v in variants if VARIANTS[v][0] == "fp32"]
    torch.set_num_threads(a.threads)
    info = speed.machine()
    from hybridrl.models.loading import load_causal_lm, load_tokenizer

    results, profiles = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        cases = [c.split(":") for c in a.cases.split(",")]
        for kind in workload.WORKLOADS:
            for name, m in speed.build_models(kind, [n for k, n in cases if k == kind], tmp).items():
                model, tok = load_causal_lm(m["path"]).eval(), load_tokenizer(m["path"])
                print(f"[{kind}/{name}]", file=sys.stderr, flush=True)
                for v, r in time_variants(model, tok, kind, a.rounds, variants).items():
                    results.append({"workload": kind, "model": name, "variant": v, **r})
                if a.profile and kind == "fixed" and name == "small":
                    profiles = {v: profile_decode(model, tok, v) for v in variants}
    write(results, profiles, info, a)


def write(results, profiles, info, a) -> None:
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    b16, b32 = ("bf16 sdpa", "fp32 sdpa") if a.variants == "attention" else ("bf16 kv32-bmm", "fp32 bmm")  # baselines
    lines = [f"CPU: {info['cpu_model']} ({info['cpu_count']} cores; 1-min load average {os.getloadavg()[0]:.2f} at the end), kind **{info['kind']}**"
             f"{''.join(f', {k}={v}' for k, v in info.get('isa_caps', {}).items())}; "
             f"{a.threads} threads; medians of {a.rounds} rounds, variants alternated within each round.\n",
             f"| workload | model | variant | generate wall s | CPU s | vs {b16} (wall) | vs {b32} (wall) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        same = {x["variant"]: x for x in results if x["workload"] == r["workload"] and x["model"] == r["model"]}
        vs = lambda base: f"{same[base]['wall_s'] / r['wall_s']:.2f}x" if base in same else "n/a"  # noqa: E731
        lines.append(f"| {r['workload']} | {r['model']} | {r['variant']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} "
                     f"| {vs(b16)} | {vs(b32)} |")
    if profiles:
        cats = ["projections", "attention", "casts and copies", "other ops", "total decode step", "sampling"]
        lines += ["\nOne decode step of fixed/small (32 rows), ms, from torch.profiler self times; 'outside ops' is "
                  "the step's wall time less its ops (Python); sampling (choose_tokens) is timed apart:\n", "| variant | " + " | ".join(cats) + " | outside ops |",
                  "|" + " --- |" * (len(cats) + 2)]
        for v, d in profiles.items():
            outside = d["total decode step"] - d["in ops"]
            lines.append(f"| {v} | " + " | ".join(f"{d.get(c, 0.0):.2f}" for c in cats) + f" | {max(outside, 0):.2f} |")
    lines.append(f"\nCommand: `{command}`")
    table = "\n".join(lines) + "\n"
    os.makedirs(a.out_dir, exist_ok=True)
    stem = os.path.join(a.out_dir, f"decode-{'bf16' if a.variants == 'attention' else 'packing'}-{info['kind']}")
    with open(stem + ".json", "w") as f:
        json.dump({"command": command, "machine": info, "results": results, "profiles": profiles}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
