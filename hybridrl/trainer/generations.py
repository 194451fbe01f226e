"""Generations as rows (prompt text, response text, score, ...) for `trainer.log_val_generations`,
`trainer.rollout_data_dir` and `trainer.validation_data_dir` (verl's field names: input, output,
gts, score, step)."""

from __future__ import annotations

import json
import math
import os
from typing import Optional

from torch import Tensor

from hybridrl.batch import Rollout
from hybridrl.rewards.manager import RewardOutput


def generation_rows(rollout: Rollout, out: RewardOutput, tokenizer, advantages: Optional[list[float]] = None) -> list[dict]:
    """One row per response, in rollout order (rows i*n .. i*n+n-1 share prompt i): the decoded
    prompt and response, ground truth, score (before shaping), reward (after), every JSON-able
    extra the scorer returned, and with `advantages` ([N] sequence-level) the advantage."""
    p = rollout.prompts
    prompts = tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in zip(p.input_ids, p.attention_mask)],
                                     skip_special_tokens=False)
    multi_turn = rollout.response_attention_mask is not None  # show the tool turns and their chat markers too
    responses = tokenizer.batch_decode(
        [ids[m.bool()].tolist() for ids, m in zip(rollout.response_ids, rollout.response_attention())],
        skip_special_tokens=not multi_turn)
    rows = []
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        row = {"input": prompt, "output": response, "gts": p.ground_truth[i], "score": float(out.scores[i]),
               "reward": float(out.rewards[i]), "data_source": p.data_source[i], "index": p.index[i],
               "response_length": int(rollout.response_mask[i].sum())}
        if advantages is not None:
            row["advantage"] = advantages[i]
        if rollout.turn_stats is not None:
            row.update({k: int(v[i]) for k, v in rollout.turn_stats.items() if bool(v[i])})
        if i < len(out.details):
            row.update({k: v for k, v in out.details[i].items() if k not in row and _jsonable(v)})
        rows.append(row)
    return rows


def add_token_details(rows: list[dict], rollout: Rollout, tokenizer, trainer_log_probs: Optional[Tensor] = None,
                      entropy: Optional[Tensor] = None) -> None:
    """trainer.dump_token_details: per-token lists on each row, over its real response tokens (tool tokens of a
    multi-turn rollout included): "tokens" (each decoded alone), "token_trained" (1: generated and trained on,
    0: a tool/observation token), "token_logprobs" (the engine's log π at sampling), and with
    `trainer_log_probs` ([N, T], the trainer's log π_old) "token_trainer_logprobs" and "token_prob_gap"
    (engine probability minus trainer probability: the mismatch that training/rollout_probs_diff_* sums up),
    and with `entropy` ([N, T], the trainer's entropy of π_old(.|s_t) at the rollout temperature) "token_entropy".
    Values are None on tool tokens, which no model sampled."""
    attention, trained = rollout.response_attention().bool(), rollout.response_mask.bool()
    for i, row in enumerate(rows):
        where = attention[i]  # [T] real tokens of row i
        ids = rollout.response_ids[i][where].tolist()
        mask = trained[i][where].tolist()
        row["tokens"] = tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=False)
        row["token_trained"] = [int(t) for t in mask]
        engine = rollout.rollout_log_probs[i][where].tolist()
        row["token_logprobs"] = [_rounded(v, t) for v, t in zip(engine, mask)]
        if trainer_log_probs is not None:
            ours = trainer_log_probs[i][where].tolist()
            row["token_trainer_logprobs"] = [_rounded(v, t) for v, t in zip(ours, mask)]
            row["token_prob_gap"] = [_rounded(math.exp(a) - math.exp(b), t) for a, b, t in zip(engine, ours, mask)]
        if entropy is not None:
            row["token_entropy"] = [_rounded(v, t) for v, t in zip(entropy[i][where].tolist(), mask)]


def _rounded(value: float, trained: bool) -> Optional[float]:
    # 6 decimals keep the dump small and still resolve the ~1e-6 gaps of an fp32 engine
    return round(value, 6) if trained and math.isfinite(value) else None


def _jsonable(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def dump_rows(folder: str, step: int, rows: list[dict]) -> str:
    """`<folder>/<step>.jsonl`, one generation per line with its step; a resumed run overwrites
    the files of the steps it redoes."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{step}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"step": step, **row}) + "\n" for row in rows)
    return path
