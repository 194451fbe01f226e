"""Step metrics with verl's names: data statistics, timings and throughput."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from torch import Tensor

from hybridrl.batch import Rollout


@contextmanager
def timed(metrics: dict[str, float], name: str) -> Iterator[None]:
    """Record wall seconds as `timing_s/<name>` (and CPU seconds of this process for the step)."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    metrics[f"timing_s/{name}"] = time.perf_counter() - wall
    if name == "step":  # CPU-seconds are steadier than wall time on shared cores
        metrics["perf/cpu_time_s"] = time.process_time() - cpu


def _stats(prefix: str, values: Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def data_metrics(rollout: Rollout, scores: Tensor, advantages: Tensor, returns: Tensor,
                 max_response_length: int) -> dict[str, float]:
    """scores [N]; advantages, returns [N, T]."""
    mask = rollout.response_mask.bool()
    lengths = rollout.response_mask.sum(-1)
    return {
        **_stats("critic/score", scores),
        **_stats("critic/rewards", scores),  # no KL-in-reward yet: rewards equal scores
        **_stats("critic/advantages", advantages[mask]),
        **_stats("critic/returns", returns[mask]),
        **_stats("response_length", lengths),
        "response_length/clip_ratio": (lengths >= max_response_length).float().mean().item(),
        **_stats("prompt_length", rollout.prompts.attention_mask.sum(-1)),
    }


def throughput_metrics(rollout: Rollout, step_seconds: float, world_size: int) -> dict[str, float]:
    """Tokens (prompt + response) processed per second per worker, as verl counts them."""
    tokens = int(rollout.prompts.attention_mask.sum() + rollout.response_mask.sum())
    return {
        "perf/total_num_tokens": float(tokens),
        "perf/time_per_step": step_seconds,
        "perf/throughput": tokens / max(step_seconds, 1e-9) / world_size,
    }
