"""Generations as rows (prompt text, response text, score, ...) for `trainer.log_val_generations`,
`trainer.rollout_data_dir` and `trainer.validation_data_dir` (verl's field names: input, output,
gts, score, step)."""

from __future__ import annotations

import json
import os
from typing import Optional

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
