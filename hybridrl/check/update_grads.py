"""The update check's gradients: the twin's mini-batch of real rollouts, one update's gradient under given
UpdateSettings changes on a fresh twin policy, the run's split of that batch, and how two gradients compare.
Shared by the one-process proofs (update.py) and the 2-rank run (update_ranks.py)."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from hybridrl.batch import TrainBatch

ZERO_SHARE = 3  # every third row of the batch gets advantage 0 (a group whose rewards were all equal)


def twin_batch(cfg, plan, ranks: int = 1) -> TrainBatch:
    """`ranks` of the twin run's mini-batches: the run's engine's responses to real prompts, advantages ±1 per row
    with every ZERO_SHARE-th row 0, π_old left to the update (on-policy: ratio 1), π_ref / π_teacher the policy's
    log-probs shifted by 0.1 where a KL or distillation loss reads them (so those terms have a gradient)."""
    from hybridrl.check.twin_policy import build_twin_policy, real_prompts, run_sampling

    policy, tokenizer = build_twin_policy(cfg, plan)
    try:
        n = cfg.actor_rollout_ref.rollout.n
        prompts = real_prompts(cfg, tokenizer, ranks * max(1, plan.mini_batch_responses_per_worker // n))
        rollout = policy.generate(prompts, n, run_sampling(cfg))
        seqs = rollout.sequences()
        shifted = policy.log_probs(seqs) - 0.1 if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.distillation.enabled \
            else None
    finally:
        policy.close()
    signs = torch.tensor([(0.0 if i % ZERO_SHARE == 0 else (-1.0) ** i) for i in range(len(seqs.input_ids))])
    advantages = signs[:, None] * rollout.response_mask  # [N, T] one advantage per response, 0 on padding
    return TrainBatch(seqs, advantages, rollout.rollout_log_probs, None, shifted, shifted)


def gradient(cfg, plan, batch: TrainBatch, lr: float | None = None, **changes) -> tuple[list[Tensor], dict]:
    """(the trainable parameters' gradients, the update's metrics) of one optimizer step of a fresh twin policy on
    `batch` as one mini-batch, with UpdateSettings `changes`; unclipped (grad_clip=inf) so a mis-scaled gradient is
    not hidden by the clip."""
    from hybridrl.check.twin_policy import build_twin_policy

    policy, _ = build_twin_policy(cfg, plan)
    try:
        policy.settings = dataclasses.replace(policy.settings, mini_batch_size=len(batch.advantages), ppo_epochs=1,
                                              shuffle=False, **{"grad_clip": math.inf, **changes})
        metrics = policy.update(batch)
        grads = [full_tensor(p.grad).detach().clone() if p.grad is not None else torch.zeros_like(full_tensor(p))
                 for p in policy.module.parameters() if p.requires_grad]
    finally:
        policy.close()
    return grads, metrics


def full_tensor(t: Tensor) -> Tensor:
    """A whole tensor from a sharded one (FSDP2's DTensor), or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def run_split(cfg, plan, batch: TrainBatch) -> dict:
    """The UpdateSettings changes that reproduce the run's split on the twin's batch: its micro-batch size; with
    use_dynamic_bsz its token budget scaled by the twin's to the run's sequence length, and small enough to make
    at least two micro-batches (the twin's responses are short: the run's budget would hold them all)."""
    from hybridrl.plan.levers import actor_update_batching, skips_zero_advantage

    budget = actor_update_batching(cfg, 1).max_tokens
    out = {"skip_zero_advantage": skips_zero_advantage(cfg)}
    if budget is None:
        return out
    lengths = batch.seqs.attention_mask.sum(-1)
    scaled = min(budget, max(int(lengths.max()), math.ceil(int(lengths.sum()) / max(2, plan.grad_accum_steps))))
    return {**out, "max_tokens": scaled}


def compare(a: list[Tensor], b: list[Tensor]) -> tuple[float, float]:
    """(relative error |a - b| / |b|, ratio <a, b> / <b, b>) of two gradients as flat vectors."""
    fa, fb = torch.cat([g.float().flatten() for g in a]), torch.cat([g.float().flatten() for g in b])
    norm = float(fb.norm()) or 1.0
    return float((fa - fb).norm()) / norm, float(fa @ fb) / norm ** 2
