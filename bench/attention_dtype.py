"""A lever the step profile points at, measured (issue #23): the trainer's attention in fp32 under bf16 autocast.

    .venv/bin/python bench/attention_dtype.py --rounds 5      # about 3 minutes on 2 shared cores

Under bf16 autocast (models/precision.py) transformers' sdpa attention runs torch's flash kernel in bf16, and
bench/profile_steps.py shows its backward slower in bf16 than in fp32 on the fixed "small" step. This times one
training forward + backward (autocast bf16 over fp32 weights, as the policy update runs it) of the bench's
random-init models with that attention against the same model whose attention upcasts q, k and v to fp32 and
runs with autocast off (o_proj's autocast casts the output back), at several sequence lengths, rows x length
about 2,048 tokens, the first row left-padded so the masked path is taken. Each round runs both variants
(alternating which goes first); medians of wall seconds over rounds (after one warm-up round). Only where bf16 is
fast (AVX512-BF16 / AMX): elsewhere bf16 is not the default and the comparison means nothing.
Writes bench/results/attention-dtype-<cpu kind>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import speed  # noqa: E402
import workload  # noqa: E402

FP32_ATTENTION = "bench_sdpa_fp32"


def sdpa_fp32(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa, with q, k, v upcast and autocast off: fp32 scores, softmax and weighted sum."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    with torch.autocast(query.device.type, enabled=False):
        return sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


def register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(FP32_ATTENTION, sdpa_fp32)
    AttentionMaskInterface.register(FP32_ATTENTION, sdpa_mask)


def train_pass(model, ids, mask) -> float:
    """Seconds of one forward + backward under bf16 autocast."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits
    torch.log_softmax(logits.float(), -1)[..., 7].sum().backward()
    return time.perf_counter() - start


def time_lengths(model, lengths: list[int], rounds: int, tokens: int) -> list[dict]:
    rows = []
    for length in lengths:
        ids = torch.randint(3, model.config.vocab_size, (max(1, tokens // length), length),
                            generator=torch.Generator().manual_seed(length))
        mask = torch.ones_like(ids)
        mask[0, :3] = 0
        times = {"bf16 attention (sdpa)": [], "fp32 attention": []}
        for r in range(rounds + 1):
            order = list(times) if r % 2 == 0 else list(times)[::-1]
            for variant in order:
                model.set_attn_implementation("sdpa" if variant.startswith("bf16") else FP32_ATTENTION)
                s = train_pass(model, ids, mask)
                if r > 0:  # round 0 warms up
                    times[variant].append(s)
        bf16, fp32 = (statistics.median(v) for v in times.values())
        rows.append({"rows": len(ids), "length": length, "bf16_attention_s": bf16, "fp32_attention_s": fp32,
                     "speedup": bf16 / fp32})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lengths", default="64,128,256,512,1024")
    p.add_argument("--tokens", type=int, default=2048, help="rows x length per pass")
    p.add_argument("--out-dir", default=os.path.join("bench", "results"))
    a = p.parse_args()
    if not speed.measure_peaks(a.threads)["fast_bf16"]:
        sys.exit("bf16 matmuls are not faster than fp32 ones here (no AVX512-BF16 / AMX, or oneDNN capped): "
                 "bf16 is not the default on this CPU, so there is nothing to compare")
    torch.set_num_threads(a.threads)
    from hybridrl.models.tiny import build_model, build_tokenizer

    register()
    info = speed.machine()
    lengths, results = [int(x) for x in a.lengths.split(",")], []
    for name in ("tiny", "small"):
        model = build_model(build_tokenizer(), seed=workload.SEED, **workload.MODELS[name]).train()
        for row in time_lengths(model, lengths, a.rounds, a.tokens):
            results.append({"model": name, **row})
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    lines = [f"CPU: {info['cpu_model']} ({info['cpu_count']} cores), kind **{info['kind']}**; {a.threads} threads; "
             f"one training forward + backward under bf16 autocast, medians of {a.rounds} rounds, variants "
             "alternated.\n", "| model | rows x length | bf16 attention (sdpa) s | fp32 attention s | fp32 speed-up |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['model']} | {r['rows']} x {r['length']} | {r['bf16_attention_s']:.3f} | {r['fp32_attention_s']:.3f} "
              f"| {r['speedup']:.2f}x |" for r in results]
    lines.append(f"\nCommand: `{command}`")
    stem = os.path.join(a.out_dir, f"attention-dtype-{info['kind']}")
    os.makedirs(a.out_dir, exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump({"command": command, "machine": info, "results": results}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
