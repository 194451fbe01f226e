"""Step metrics with verl's names: data statistics, timings, throughput, MFU and memory."""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import Tensor

from hybridrl import progress, timeline
from hybridrl.algos.advantages import AdvantageOutput
from hybridrl.algos.group_filter import groups_with_spread
from hybridrl.algos.value_loss import explained_variance
from hybridrl.batch import Rollout
from hybridrl.models.flops import ModelShape, measured_peak_flops, shared_prompt_training_flops, training_flops
from hybridrl.rewards.manager import RewardOutput


@contextmanager
def timed(metrics: dict[str, float], name: str) -> Iterator[None]:
    """Add the wall seconds to `timing_s/<name>` (and CPU seconds of this process for the step); the
    phase is shown while it runs (hybridrl/progress.py) and is a span of the phase timeline when it is on
    (hybridrl/timeline.py).

    Adding, not overwriting: a stage that runs several times in a step (dynamic sampling's
    generation rounds) reports its total."""
    wall, cpu = time.perf_counter(), time.process_time()
    with progress.phase(name), timeline.span(name):
        yield
    key = f"timing_s/{name}"
    metrics[key] = metrics.get(key, 0.0) + time.perf_counter() - wall
    if name == "step":  # CPU-seconds are steadier than wall time on shared cores
        metrics["perf/cpu_time_s"] = time.process_time() - cpu


def _stats(prefix: str, values: Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:  # no token to report on (an agent batch in which every agent failed): 0, not a crash
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def data_metrics(rollout: Rollout, reward: RewardOutput, token_rewards: Tensor, adv: AdvantageOutput,
                 values: Optional[Tensor], max_response_length: int) -> dict[str, float]:
    """token_rewards [N, T] (after any KL penalty); values [N, T] or None without a critic."""
    mask = rollout.response_mask.bool()
    lengths = rollout.response_mask.sum(-1)
    out = {
        **_stats("critic/score", reward.rewards),  # verl: the sequence score after reward shaping
        **_stats("critic/rewards", (token_rewards * rollout.response_mask).sum(-1)),  # ... and after KL-in-reward
        **_stats("critic/advantages", adv.advantages[mask]),
        **_stats("critic/returns", adv.returns[mask]),
        **_stats("response_length", lengths),
        # a multi-turn response's budget counts its tool tokens too
        "response_length/clip_ratio": (rollout.response_attention().sum(-1) >= max_response_length).float().mean().item(),
        **_stats("prompt_length", rollout.prompts.attention_mask.sum(-1)),
        "reward/accuracy": reward.scores.mean().item(),  # the scorers' values before shaping
        "reward/errors": float(reward.errors.sum()),  # responses whose scorer failed (on_error=zero scored them 0)
    }
    out.update(signal_metrics(rollout, reward.rewards, lengths))
    if rollout.turn_stats is not None:
        out.update(multi_turn_metrics(rollout.turn_stats))
    if bool((reward.overlong_penalty != 0).any()):
        out["reward/overlong_penalty/mean"] = reward.overlong_penalty.mean().item()
        out["reward/overlong_penalty/frac"] = (reward.overlong_penalty != 0).float().mean().item()
    for key, extra in reward.extras.items():  # a reward function's extra outputs (acc, pred_len, ...)
        out[f"reward/{key}/mean"] = extra.float().mean().item()
    if values is not None:
        out.update(_stats("critic/values", values[mask]))
        out["critic/vf_explained_var"] = explained_variance(values, adv.returns, rollout.response_mask)
    return out


def multi_turn_metrics(stats: dict[str, Tensor]) -> dict[str, float]:
    """Tool use of a multi-turn batch (stats: name -> [N] per-response counts, rollout/multi_turn.py):
    `num_turns/{min,max,mean}` (model turns), `tool_call_counts/{min,max,mean}` (tool calls run per
    response), `tool_call_counts/frac_with_call` (share of responses with at least one call run),
    `tool_call_counts/<tool>` and `tool_errors/<kind>` (totals over the batch)."""
    calls = [v for k, v in stats.items() if k.startswith("tool_call_counts/")]
    per_response = torch.stack(calls).sum(0) if calls else torch.zeros_like(stats["num_turns"])
    out = {**_stats("num_turns", stats["num_turns"]), **_stats("tool_call_counts", per_response),
           "tool_call_counts/frac_with_call": (per_response > 0).float().mean().item()}
    out.update({k: float(v.sum()) for k, v in stats.items() if k != "num_turns"})
    return out


def signal_metrics(rollout: Rollout, rewards: Tensor, lengths: Tensor) -> dict[str, float]:
    """`critic/frac_zero_std_groups`: share of prompt groups whose responses all got the same reward
    (zero advantage for every group-relative estimator: no learning signal). `reward/length_corr`:
    Pearson correlation of sequence reward and response length over the batch (0 when either is
    constant); drifting towards +1 while accuracy stalls is the signature of length hacking."""
    _, group = torch.unique(rollout.uid, return_inverse=True)
    flat_rows = ~groups_with_spread(rewards, rollout.uid)
    frac = torch.unique(group[flat_rows]).numel() / (int(group.max()) + 1)
    x, y = lengths.double(), rewards.double()
    corr = 0.0
    if len(x) > 1 and float(x.std()) > 0 and float(y.std()) > 0:
        corr = float(torch.corrcoef(torch.stack([x, y]))[0, 1])
    return {"critic/frac_zero_std_groups": frac, "reward/length_corr": corr}


def throughput_metrics(rollout: Rollout, step_seconds: float, world_size: int) -> dict[str, float]:
    """Tokens (prompt + response) processed per second per worker, as verl counts them."""
    tokens = int(rollout.prompts.attention_mask.sum() + rollout.response_attention().sum())
    return {
        "perf/total_num_tokens": float(tokens),
        "perf/time_per_step": step_seconds,
        "perf/throughput": tokens / max(step_seconds, 1e-9) / world_size,
    }


def timing_per_token_metrics(metrics: dict[str, float], rollout: Rollout) -> dict[str, float]:
    """`timing_per_token_ms/<phase>`: generation per response token, every other phase per token
    of prompt + response (the tokens its forward passes read), as verl divides them."""
    response = float(rollout.response_mask.sum())
    overall = response + float(rollout.prompts.attention_mask.sum())
    out = {}
    for key, seconds in metrics.items():
        if key.startswith("timing_s/"):
            phase = key[len("timing_s/"):]
            tokens = response if phase in ("gen", "gen_max") else overall
            out[f"timing_per_token_ms/{phase}"] = 1000 * seconds / max(tokens, 1.0)
    return out


def actor_mfu(shape: ModelShape, rollout: Rollout, ppo_epochs: int, seconds: float,
              world_size: int = 1, share_prompts: bool = False, computed: Tensor | None = None) -> dict[str, float]:
    """`perf/mfu/actor`: model FLOPs of the actor update (ppo_epochs forward + backward passes over
    every sequence, models/flops.py) per second per worker, over the measured matmul peak of the
    weights' device and dtype. With prompt sharing a group's prompt counts once: what a micro-batch
    holding whole groups computes (a group split over micro-batches computes more, so the figure
    errs low, never above the truth). `computed` (bool [N]): the rows the update computed, when
    zero-advantage rows were left out (actor.skip_zero_advantage)."""
    dims = (shape.n_matmul, shape.n_layers, shape.width)
    prompt, response = rollout.prompts.attention_mask.sum(-1), rollout.response_attention().sum(-1)
    uid = rollout.uid
    if computed is not None:
        rows = computed.nonzero()[:, 0]
        prompt, response, uid = prompt[rows], response[rows], uid[rows]
    if share_prompts:
        flops = ppo_epochs * shared_prompt_training_flops(prompt, response, uid, *dims)
    else:
        flops = ppo_epochs * training_flops(prompt + response, *dims)
    peak = measured_peak_flops(shape.device, shape.dtype)
    return {"perf/mfu/actor": flops / max(seconds, 1e-9) / world_size / peak}


def memory_metrics() -> dict[str, float]:
    """`perf/max_memory_allocated_gb` (GiB): the CUDA allocator's peak on GPU, on CPU the process's
    peak resident set (getrusage reports KiB on Linux, bytes on macOS)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return {"perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
                "perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved() / 2**30}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {"perf/max_memory_allocated_gb": peak / 2**30}
