"""The stand-in reward of the checks' twin runs (check/twin_run.py): 0 or 1 from a checksum of the response text.

A random twin almost never writes an answer the user's scorer accepts, so with the user's reward every score is
0, GRPO's advantages are 0 and the policy never moves: resuming and exporting would then be "proved" on weights
that never changed. This scorer gives a group of responses different scores (responses differ, so their
checksums do), which makes every step change the weights. It is deterministic across processes (crc32, not
Python's salted hash), as a resume comparison needs. The user's own scorer is proved by the reward check.

No imports beyond the standard library: the scoring pool loads this file in each worker process.
"""

from __future__ import annotations

import zlib


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the crc32 of the response is odd, else 0.0 (reward_model.reward_manager=naive / dapo)."""
    return float(zlib.crc32(str(solution_str).encode("utf-8")) & 1)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos) -> list[float]:
    """compute_score of every response (reward_model.reward_manager=batch: one call per batch, lists)."""
    return [compute_score(s, text, truth) for s, text, truth in zip(data_sources, solution_strs, ground_truths)]
