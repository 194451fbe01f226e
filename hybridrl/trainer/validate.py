"""Validation: generate for every validation prompt and report the mean score per data_source."""

from __future__ import annotations

from collections import defaultdict

from hybridrl.data.dataset import RLDataset
from hybridrl.rewards.manager import RewardManager
from hybridrl.rollout.base import RolloutEngine, SamplingParams, generate_rollout


def validate(engine: RolloutEngine, data: RLDataset, reward: RewardManager, sampling: SamplingParams, n: int,
             pad_id: int, batch_size: int = 256) -> dict[str, float]:
    """`val-core/<data_source>/reward/mean@<n>` for each source, `val-aux/<data_source>/<extra>/mean@<n>`
    for a reward function's extras, and the mean response length."""
    scores: dict[str, list[float]] = defaultdict(list)
    extras: dict[tuple[str, str], list[float]] = defaultdict(list)
    lengths: list[float] = []
    errors = 0
    for start in range(0, len(data), batch_size):
        prompts = data.collate(list(range(start, min(start + batch_size, len(data)))), pad_id)
        rollout = generate_rollout(engine, prompts, n, sampling)
        out = reward.score(rollout)
        for i, (source, score) in enumerate(zip(rollout.prompts.data_source, out.scores.tolist())):
            scores[source].append(score)
            for key, values in out.extras.items():
                extras[(source, key)].append(float(values[i]))
        lengths += rollout.response_mask.sum(-1).float().tolist()
        errors += int(out.errors.sum())
    metrics = {f"val-core/{src}/reward/mean@{n}": sum(v) / len(v) for src, v in sorted(scores.items())}
    metrics.update({f"val-aux/{src}/{key}/mean@{n}": sum(v) / len(v) for (src, key), v in sorted(extras.items())})
    metrics["val-aux/response_length/mean"] = sum(lengths) / len(lengths)
    metrics["val-aux/reward/errors"] = float(errors)
    return metrics


def mean_val_score(metrics: dict[str, float]) -> float | None:
    """The unweighted mean of the per-source validation scores, for the run summary."""
    core = [v for k, v in metrics.items() if k.startswith("val-core/")]
    return sum(core) / len(core) if core else None
