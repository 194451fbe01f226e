"""Validation: generate for every validation prompt and report the mean score per data_source."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Optional

from hybridrl import progress
from hybridrl.batch import PromptBatch, Rollout
from hybridrl.data.dataset import RLDataset
from hybridrl.eval.metrics import group_metrics
from hybridrl.rewards.manager import RewardManager
from hybridrl.rollout.base import SamplingParams
from hybridrl.trainer.generations import generation_rows


@dataclass
class Validation:
    metrics: dict[str, float] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # every generation (generation_rows), prompt by prompt


Generate = Callable[[PromptBatch, int, SamplingParams], Rollout]  # (prompts, n, sampling) -> n responses each


def validate(generate: Generate, data: RLDataset, reward: RewardManager, sampling: SamplingParams, n: int,
             pad_id: int, batch_size: int = 256, on_rollout: Optional[Callable[[Rollout], None]] = None,
             label: str = "validation") -> Validation:
    """Per data_source, averaged over its prompts: `val-core/<src>/reward/{mean,std}@n` and, with
    n > 1, `{best,worst,pass,maj}@k` for k = 1, 2, 4, ... n (maj@k when the scorer returns `pred`;
    pass@k counts `acc`, else score > 0, as correct); `val-aux/<src>/<extra>/mean@n` for a reward
    function's extras, the mean response length and the scorer-error count. `on_rollout` sees each
    batch's Rollout (its token ids), in order, e.g. for log-probs under another model. The prompts
    done are shown as the phase `label` (hybridrl/progress.py)."""
    per_prompt: dict[str, list[dict[str, float]]] = defaultdict(list)
    extras: dict[tuple[str, str], list[float]] = defaultdict(list)
    lengths: list[float] = []
    errors = 0
    rows: list[dict] = []
    prompts_per_batch = max(1, batch_size // n)
    with progress.phase(label, total=len(data), unit="prompt"):
        for start in range(0, len(data), prompts_per_batch):
            prompts = data.collate(list(range(start, min(start + prompts_per_batch, len(data)))), pad_id)
            rollout = generate(prompts, n, sampling)  # rows i*n .. i*n+n-1: prompt i
            if on_rollout is not None:
                on_rollout(rollout)
            out = reward.score(rollout)
            rows += generation_rows(rollout, out, reward.tokenizer)
            scores = out.scores.tolist()
            for i in range(0, len(scores), n):
                group = range(i, i + n)
                preds = [out.details[j].get("pred") for j in group]
                correct = out.extras["acc"][i:i + n].tolist() if "acc" in out.extras else None
                per_prompt[rollout.prompts.data_source[i]].append(group_metrics(
                    scores[i:i + n], preds if all(isinstance(p, (str, int, float)) for p in preds) else None, correct))
            for i, source in enumerate(rollout.prompts.data_source):
                for key, values in out.extras.items():
                    extras[(source, key)].append(float(values[i]))
            lengths += rollout.response_mask.sum(-1).float().tolist()
            errors += int(out.errors.sum())
            progress.advance(len(prompts.index), "prompt")
    metrics = {f"val-core/{src}/reward/{name}": sum(g[name] for g in groups) / len(groups)
               for src, groups in sorted(per_prompt.items()) for name in groups[0]}
    metrics.update({f"val-aux/{src}/{key}/mean@{n}": sum(v) / len(v) for (src, key), v in sorted(extras.items())})
    metrics["val-aux/response_length/mean"] = sum(lengths) / len(lengths)
    metrics["val-aux/reward/errors"] = float(errors)
    return Validation(metrics, rows)


def mean_val_score(metrics: dict[str, float]) -> float | None:
    """The unweighted mean of the per-source validation scores, for the run summary."""
    core = [v for k, v in metrics.items() if k.startswith("val-core/") and "/reward/mean@" in k]
    return sum(core) / len(core) if core else None
