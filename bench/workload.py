"""The GRPO speed benchmark's fixed workload, shared by both sides (`make bench`).

Imports only the standard library, so the TRL runner (its own venv, no hybridrl) can read it:
- models: random-init Qwen2 "tiny" and "small", built with hybridrl's locally trained byte-level
  BPE tokenizer (bench/speed.py writes them once per invocation);
- prompts: "What is a+b? Answer:" as one user message (both trainers apply the same ChatML template);
- per step: 4 prompts x 8 samples, exactly 32 new tokens (EOS ignored, so the work never varies),
  temperature 1, fp32, AdamW lr 1e-5, one optimizer step, no KL, DAPO token-mean loss.
"""

from __future__ import annotations

import argparse
import random

MODELS = {  # hidden, layers, heads, intermediate
    "tiny": dict(hidden=256, layers=4, heads=4, intermediate=688),
    "small": dict(hidden=512, layers=8, heads=8, intermediate=1376),
}
PROMPTS_PER_STEP = 4
SAMPLES_PER_PROMPT = 8
NEW_TOKENS = 32
LR = 1e-5
SEED = 0


def prompts(count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """(question, answer) pairs of two-digit addition."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        pairs.append((f"What is {a}+{b}? Answer:", str(a + b)))
    return pairs


def correct(completion: str, answer: str) -> float:
    """The reward both sides compute: 1 when the answer appears in the completion."""
    return float(answer in completion)


def shaped(completion: str, answer: str) -> float:
    """The benchmark's reward: correctness plus the share of digits in the completion. A random
    model is never correct, and an all-zero reward would give every GRPO group zero advantage;
    the digit share varies within a group, so every response carries gradient on both sides."""
    digits = sum(ch.isdigit() for ch in completion) / max(len(completion), 1)
    return correct(completion, answer) + digits


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """hybridrl's custom_reward_function entry point (verl's signature) for `shaped`."""
    return shaped(solution_str, str(ground_truth))


def runner_args(description: str, overrides: bool = False) -> argparse.Namespace:
    """The command line both runners (bench/trl_grpo.py, bench/hybridrl_grpo.py) take."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="the model folder (bench/speed.py builds it)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", required=True, help="JSON lines, one per step")
    if overrides:
        p.add_argument("overrides", nargs="*", help="extra config overrides")
    return p.parse_args()
