"""The `reward` check's part on the policy's own answers: the REAL model (when its weights are small enough to
sample on this machine) answers a few training prompts with the run's validation sampling, and the run's reward
manager scores them. When every answer it finished scores no more than an empty response, the run has nothing to
learn from: every GRPO group's rewards are equal, so every advantage is 0 (the SmolLM2 GSM8K run whose scorer wants
'#### <number>' while the model never wrote it).

The twin cannot stand in here: its random weights answer nothing. A larger model is left to the run itself.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from hybridrl.check.context import CheckContext
from hybridrl.check.data import spread
from hybridrl.check.result import Result, failed, not_applicable, passed

ANSWER_MAX_BYTES = 1_500_000_000  # weights sampled here, on the CPU: SmolLM2-135M's 0.5 GB answer in ~10 s
ANSWER_PROMPTS = 8  # training prompts answered, one response each, in one batch
CANDIDATES = 32  # rows spread over the training data, of which the ANSWER_PROMPTS shortest prompts are answered
ANSWER_TOKENS = 256  # new tokens per answer at most (and data.max_response_length): room for a short derivation
ANSWER_SECONDS = 90.0  # decoding stops here on a slow machine: the answers not finished by then are not judged
# (SmolLM2-135M finishes its 8 in ~10 s on 2 idle cores; at 25 s a busy machine once left all 8 unjudged)
MIN_FINISHED = 2  # finished answers needed to say "none scores": one is too few to speak for the model
TAIL_CHARS = 120

# what each built-in scorer reads (hybridrl/rewards/scorers/), whether a response holds it, and the instruction
# that asks for it (verl's GSM8K and MATH preprocessing end each question with one): names what an answer lacks
GSM8K_ASK = 'Let\'s think step by step and output the final answer after "####".'
MATH_ASK = "Let's think step by step and output the final answer within \\boxed{}."


@dataclass(frozen=True)
class Format:
    what: str  # the format, in words
    holds: Callable[[str], bool]  # a response holds it (right or wrong)
    marker: Optional[str]  # a prompt that contains it asks for the format already
    ask: Optional[str]  # the instruction to append to the prompts


def _formats() -> dict[str, Format]:
    from hybridrl.rewards.scorers import arithmetic, gsm8k, math_answer

    boxed = Format("a final \\boxed{answer}", lambda t: math_answer.last_boxed(t) is not None, "\\boxed", MATH_ASK)
    return {"openai/gsm8k": Format("'#### <number>' in the last 300 characters",
                                   lambda t: gsm8k.extract_answer(t) is not None, "####", GSM8K_ASK),
            "arithmetic": Format("an integer (the last one is the answer)",
                                 lambda t: arithmetic.INTEGER.search(t) is not None, None, None),
            **{source: boxed for source in math_answer.MATH_SOURCES}}


@dataclass
class Answers:
    """The model's answers to the picked rows, one each: the text, whether it ended (EOS, or the run's own
    length limit, where the run cuts it too), its rule score and an empty response's to the same row."""

    rows: list[tuple[int, dict]]  # (index in data.train_files, row)
    texts: list[str]
    finished: list[bool]
    scores: list[float]
    floor: list[float]
    tokens: int  # the cap on new tokens
    seconds: float  # loading and decoding
    stopped_at: Optional[int]  # decoding ran out of ANSWER_SECONDS after this many tokens; None: it did not

    def cap(self) -> str:
        """What cut the unfinished answers."""
        return (f"the check's {ANSWER_SECONDS:g}s limit (at {self.stopped_at} tokens; this machine is slow or busy)"
                if self.stopped_at is not None else f"the check's {self.tokens}-token cap")

    def above(self, ks) -> list[int]:
        return [k for k in ks if self.scores[k] > self.floor[k]]


def weights_size(folder: str) -> int:
    """Bytes of a model folder's weights (safetensors, else PyTorch .bin files)."""
    from hybridrl.models.loading import weights_bytes

    size = weights_bytes(folder)
    return size or sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".bin"))


def _size(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def _picked_rows(ctx: CheckContext, rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """The ANSWER_PROMPTS shortest prompts of CANDIDATES rows spread over the run's (of those that fit
    data.max_prompt_length; the data check reports the others), in file order. The shortest cost the least
    prefill on a CPU, and are the easier problems: a model that scores on none of them scores on little."""
    from hybridrl.data.dataset import encode_prompts

    d = ctx.cfg.data
    candidates = spread(rows, CANDIDATES)
    lengths = [len(ids) for ids in encode_prompts(ctx.tokenizer, [r[d.prompt_key] for _, r in candidates])]
    fit = sorted((n, k) for k, n in enumerate(lengths) if n <= d.max_prompt_length)[:ANSWER_PROMPTS]
    return [candidates[k] for k in sorted(k for _, k in fit)]


class Deadline:
    """An on_step callback (rollout/hf.py) that ends every row once `seconds` have passed, and remembers it did."""

    def __init__(self, seconds: float):
        self.end, self.fired = time.perf_counter() + seconds, False

    def __call__(self, start: int, t: int, tokens: torch.Tensor, live: torch.Tensor,
                 logits: torch.Tensor) -> Optional[torch.Tensor]:
        self.fired = self.fired or time.perf_counter() > self.end
        return torch.ones_like(live) if self.fired else None


def _generate(ctx: CheckContext, rows: list[tuple[int, dict]], tokens: int):
    """The real model's answers (a Rollout, one per row) with the run's validation sampling (greedy by default),
    through the hf engine the run uses on a CPU; and whether each ended with EOS."""
    from hybridrl.batch import Rollout
    from hybridrl.check.rollouts import prompt_batch
    from hybridrl.plan.levers import rollout_compute_dtype
    from hybridrl.models.loading import eos_token_ids, load_causal_lm
    from hybridrl.models.precision import Precision
    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.hf import HFRolloutEngine

    cfg, tok = ctx.cfg, ctx.tokenizer
    rollout_cfg = cfg.actor_rollout_ref.rollout
    vk = rollout_cfg.val_kwargs
    model = load_causal_lm(ctx.model_path).eval().requires_grad_(False)
    eos = eos_token_ids(model, tok)
    # the run's hf engine settings (workers/build.py), on this machine's CPU
    engine = HFRolloutEngine(model, eos, tok.pad_token_id, seed=cfg.trainer.seed, lean_decode=rollout_cfg.lean_decode,
                             pack_weights=rollout_cfg.pack_weights, precision=Precision.of(rollout_compute_dtype(cfg)))
    prompts = prompt_batch(tok, [r for _, r in rows], cfg.data.prompt_key, cfg.data.reward_fn_key)
    sampling = SamplingParams(tokens, vk.temperature, vk.top_p, vk.top_k, vk.do_sample)
    deadline = Deadline(ANSWER_SECONDS)
    out = engine.generate(prompts.input_ids, prompts.attention_mask, sampling, torch.arange(len(rows)), "val",
                          on_step=deadline)
    last = out.response_ids.gather(1, (out.response_mask.sum(1, keepdim=True) - 1).clamp(min=0))[:, 0]  # [n]
    ended = torch.isin(last, torch.tensor(eos, dtype=torch.long)).tolist()
    rollout = Rollout(prompts, out.response_ids, out.response_mask, out.log_probs, torch.arange(len(rows)))
    return rollout, ended, deadline.fired


def _answers(ctx: CheckContext, manager, rows: list[tuple[int, dict]]) -> Answers:
    from hybridrl.check.rollouts import rollout_of

    d, start = ctx.cfg.data, time.perf_counter()
    tokens = min(ANSWER_TOKENS, d.max_response_length)
    rollout, ended, stopped = _generate(ctx, rows, tokens)
    seconds = time.perf_counter() - start
    mask = rollout.response_mask.bool()
    texts = [ctx.tokenizer.decode(ids[m], skip_special_tokens=True) for ids, m in zip(rollout.response_ids, mask)]
    # an answer cut at the run's own limit is what the run scores too; one cut by the check's cap is unknown
    cut_as_run = tokens == d.max_response_length
    finished = [e or (cut_as_run and int(m.sum()) == tokens) for e, m in zip(ended, mask)]
    empty = rollout_of(ctx.tokenizer, [r for _, r in rows], [""] * len(rows), d.prompt_key, d.reward_fn_key)
    scores, floor = (_rule_scores(manager, r) for r in (rollout, empty))
    return Answers(rows, texts, finished, scores, floor, tokens, seconds,
                   rollout.response_ids.shape[1] if stopped else None)


def _rule_scores(manager, rollout) -> list[float]:
    out = manager.score(rollout)
    return out.extras.get("rule_score", out.scores).tolist()


def own_answers(ctx: CheckContext, manager, rows: list[tuple[int, dict]]) -> Result:
    """The model's own answers to a few training rows score above an empty response on some of them; n/a
    without a rule scorer, with multi-turn rollouts, or for weights over ANSWER_MAX_BYTES."""
    cfg = ctx.cfg
    if not manager.use_rules:
        return not_applicable("the model's own answers: a reward model alone scores, and its twin is random")
    if cfg.actor_rollout_ref.rollout.multi_turn.enable:
        return not_applicable("the model's own answers: multi-turn rollouts answer with tools (see multi-turn)")
    size = weights_size(ctx.model_path)
    if size > ANSWER_MAX_BYTES:
        return not_applicable(f"the model's own answers: its weights ({_size(size)}) are too large to sample on "
                              f"this machine (up to {_size(ANSWER_MAX_BYTES)}); the run's first steps' "
                              "critic/score/mean shows it")
    picked = _picked_rows(ctx, rows)
    if not picked:
        return not_applicable("the model's own answers: no prompt fits data.max_prompt_length (see data)")
    return _judge(ctx, _answers(ctx, manager, picked))


def _judge(ctx: CheckContext, a: Answers) -> Result:
    n, done = len(a.texts), [k for k, f in enumerate(a.finished) if f]
    how = (f"{n} training prompts answered by the model with the run's validation sampling "
           f"({'sampled' if ctx.cfg.actor_rollout_ref.rollout.val_kwargs.do_sample else 'greedy'}), up to {a.tokens} "
           f"new tokens, in {a.seconds:.0f}s: {len(done)} finished")
    scored = a.above(range(n))
    if scored:
        mean = sum(a.scores) / n
        return passed(f"the model's own answers score above an empty response on {len(scored)}/{n} prompts", how,
                      f"mean score {mean:.3g}")
    cut = n - len(done)
    if len(done) < min(MIN_FINISHED, n):
        return not_applicable(f"the model's own answers: {cut} of {n} were cut by {a.cap()} "
                              f"(data.max_response_length={ctx.cfg.data.max_response_length}): too few finished to "
                              "judge, and none scores", how)
    more = f" ({cut} more were cut by {a.cap()})" if cut else ""
    k = done[0]
    index, row = a.rows[k]
    truth = (row.get("reward_model") or {}).get("ground_truth")
    facts = [how, f"an answer (data.train_files row {index}, ground truth {truth!r}) ends "
                  f"{a.texts[k][-TAIL_CHARS:]!r}"]
    what, fix = _cause(ctx, a, done)
    return failed(f"the model's own answers score {min(a.scores):g} (no more than an empty response) on "
                  f"{len(done)}/{len(done)} prompts it finished{more}: the run starts with (almost) no reward to "
                  "learn from", *facts, *what, fix=fix)


def _cause(ctx: CheckContext, a: Answers, done: list[int]) -> tuple[list[str], str]:
    """What the scorer looks for and how many answers hold it (built-in scorers), and the fix."""
    crf, key = ctx.cfg.custom_reward_function, ctx.cfg.data.reward_fn_key
    sft = "warm the model up by SFT on answers in that format (hybridrl sft)"
    if crf.path:
        return [f"the scorer is custom_reward_function {crf.path}:{crf.name}"], (
            "make custom_reward_function accept the answers the model writes, add an instruction to the prompts "
            f"asking for the format it reads, or {sft}")
    source = a.rows[done[0]][1][key]
    form = _formats().get(source)
    if form is None:
        return [f"the scorer is the built-in {source!r} one"], f"ask for the format it reads in the prompts, or {sft}"
    held = sum(form.holds(a.texts[k]) for k in done)
    facts = [f"the {source!r} scorer reads {form.what}: {held}/{len(done)} finished answers hold it"]
    if held:  # the format is there and the answers are wrong: the task is beyond the model
        return facts, ("the model writes the format but not the right answer: warm it up by SFT on worked "
                       "solutions (hybridrl sft), start from a stronger model, or use easier data")
    prompt = str(a.rows[done[0]][1][ctx.cfg.data.prompt_key])
    if form.marker is not None and form.marker in prompt:  # asked for and not written: the model cannot follow it
        facts.append("the prompts ask for it; the model does not follow the instruction")
        ask = ""
    else:
        ask = (f"append to each prompt the instruction verl's preprocessing appends ({form.ask}), "
               if form.ask else "ask for it in the prompts, ")
    return facts, (f"{ask}score the model's own format with a custom_reward_function (e.g. the last number), "
                   f"or {sft}")
