"""The GRPO speed benchmark's two workloads, shared by both sides (`make bench`).

Imports only the standard library, so the TRL runner (its own venv, no hybridrl) can read it.

"fixed" (the engine on fixed work):
- models: random-init Qwen2 "tiny" and "small", built with hybridrl's locally trained byte-level
  BPE tokenizer (bench/speed.py writes them once per invocation);
- prompts: "What is a+b? Answer:" as one user message (both trainers apply the same ChatML template);
- exactly 32 new tokens (EOS ignored, so the work never varies); reward `shaped`.

"learning" (what a run looks like): SFT'd models on the arithmetic task, EOS on, so response lengths
vary and a realistic share of groups gets equal rewards (zero advantage):
- models: "tiny" is the bundled tiny-arith, "small" the small shape given a short SFT by bench/speed.py;
- prompts: "What is a+b?" as `hybridrl data arithmetic` writes them (what the models were SFT'd on);
- at most 32 new tokens, reward 1 when the last integer of the completion is the sum (the arithmetic scorer).

Both: per step 4 prompts x 8 samples, temperature 1, AdamW lr 1e-5, one optimizer step, no KL, DAPO
token-mean loss.
"""

from __future__ import annotations

import argparse
import random
import re

MODELS = {  # hidden, layers, heads, intermediate
    "tiny": dict(hidden=256, layers=4, heads=4, intermediate=688),
    "small": dict(hidden=512, layers=8, heads=8, intermediate=1376),
}
PROMPTS_PER_STEP = 4
SAMPLES_PER_PROMPT = 8
NEW_TOKENS = 32
LR = 1e-5
SEED = 0


def _sums(count: int, seed: int, low: int, question: str) -> list[tuple[str, str]]:
    """(question, answer) pairs of two-number sums, operands drawn from low..99; `question` has {a} and {b}."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a, b = rng.randint(low, 99), rng.randint(low, 99)
        pairs.append((question.format(a=a, b=b), str(a + b)))
    return pairs


def prompts(count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """The fixed workload's (question, answer) pairs of two-digit addition."""
    return _sums(count, seed, 10, "What is {a}+{b}? Answer:")


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


WORKLOADS = ("fixed", "learning")


def arith_prompts(count: int, seed: int = SEED) -> list[tuple[str, str]]:
    """(question, answer) pairs in the arithmetic task's own format (hybridrl/data/arithmetic.py)."""
    return _sums(count, seed, 0, "What is {a}+{b}?")


def last_integer_correct(completion: str, answer: str) -> float:
    """The arithmetic scorer's rule (hybridrl/rewards/scorers/arithmetic.py): the last integer is the answer."""
    numbers = re.findall(r"-?\d+", completion)
    return 1.0 if numbers and int(numbers[-1]) == int(answer) else 0.0


def compute_arith_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """hybridrl's custom_reward_function entry point for the learning workload."""
    return last_integer_correct(solution_str, str(ground_truth))


def workload_prompts(workload: str, count: int) -> list[tuple[str, str]]:
    return arith_prompts(count) if workload == "learning" else prompts(count)


def zero_std_share(rewards: list[float], group: int = SAMPLES_PER_PROMPT) -> float:
    """The share of consecutive groups of `group` rewards that are all equal (zero advantage under GRPO)."""
    groups = [rewards[i:i + group] for i in range(0, len(rewards), group)]
    return sum(len(set(g)) == 1 for g in groups) / max(len(groups), 1)


def runner_args(description: str, overrides: bool = False, profile: bool = False) -> argparse.Namespace:
    """The command line both runners (bench/trl_grpo.py, bench/hybridrl_grpo.py) take."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="the model folder (bench/speed.py builds it)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", required=True, help="JSON lines, one per step")
    p.add_argument("--workload", choices=WORKLOADS, default="fixed")
    p.add_argument("--bf16", action="store_true", help="bf16 compute (TRL's bf16=True; hybridrl's bf16 levers)")
    p.add_argument("--compile", action="store_true", help="TRL's torch_compile=True (the model under torch.compile)")
    if profile:
        p.add_argument("--profile", help="after the steps, profile one more and write its summary (JSON) here")
    if overrides:
        p.add_argument("overrides", nargs="*", help="extra config overrides")
    return p.parse_args()
