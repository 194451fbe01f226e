"""The `update` check: one mini-batch's policy update under the run's own split computes the gradient of the
mini-batch's loss, with the normaliser `loss_agg_mode` defines, and steps down that loss.

On the twin, a mini-batch of the run's own rollouts on real prompts, with advantages fixed here (some rows 0),
goes through `Policy.update` (workers/policy.py, update_loop.py: the code the run trains with) several ways,
each on a freshly built policy: under the run's split (micro-batches or token budgets, zero-advantage rows
left out where configured, LoRA or full, the run's precision) and in one piece. Gradient accumulation is exact
only if every micro-batch's loss is normalised by the whole mini-batch (algos/reduce.py), so the two gradients
must agree within the precision's rounding; a mis-scaled accumulation shows as their ratio.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from torch import Tensor

from hybridrl.batch import TrainBatch
from hybridrl.check.registry import check
from hybridrl.check.result import Result, combine, failed, not_applicable, passed
from hybridrl.check.update_grads import compare, gradient, run_split, twin_batch
from hybridrl.check.update_ranks import two_rank_gradient

ARR = "actor_rollout_ref"
ACTOR = f"{ARR}.actor"
# Relative |g_split - g_single| / |g_single| within which two orders of summing one gradient agree, by the
# actor's compute dtype: fp32 sums in another order differ by ~1e-7 relative; under bf16 autocast a micro-batch's
# matmuls round differently with its shape (8 mantissa bits: ~4e-3 per product), measured ~1e-3 on the twin.
GRAD_TOL = {"fp32": 1e-4, "bf16": 2e-2}
LOSS_TOL = {"fp32": 1e-5, "bf16": 1e-3}  # relative, on the loss value (ratio 1 on-policy: no forward rounding)


# The loss normaliser of each loss_agg_mode, from its definition (values, mask [B, T]; L the constant length):
# written out here, not taken from algos/reduce.py, so a wrong reducer there cannot agree with itself.
def _seq_sums(v: Tensor, m: Tensor) -> Tensor:
    return (v * m).sum(-1)  # [B]


DEFINITIONS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "token-mean": lambda v, m, L: (v * m).sum() / m.sum(),  # DAPO: every token of the mini-batch weighs the same
    "token-sum": lambda v, m, L: (v * m).sum(),
    "seq-mean-token-sum": lambda v, m, L: _seq_sums(v, m).mean(),
    "seq-mean-token-mean": lambda v, m, L: (_seq_sums(v, m) / m.sum(-1).clamp(min=1)).mean(),  # GRPO paper
    "seq-mean-token-sum-norm": lambda v, m, L: _seq_sums(v, m).mean() / L,  # Dr.GRPO, Liu et al. 2025
}


@check("update")
def update(ctx) -> Result:
    """One mini-batch's gradient under the run's own split (micro-batches or token budgets, LoRA or full, bf16 or
    fp32, the declared data-parallel ranks) equals the single-batch gradient within the dtype's tolerance; the
    loss normaliser equals loss_agg_mode's definition; leaving zero-advantage rows out leaves the gradient
    unchanged; one optimiser step along the loss lowers it on the same batch."""
    from hybridrl.check.twin_policy import twin_cfg

    # the update never reads the engine: hf samples the batch, not a vllm engine started for every policy built here
    cfg, plan = twin_cfg(ctx, "update", actor_rollout_ref__rollout__name="hf")
    batch = twin_batch(cfg, plan)
    dtype = _compute_dtype(cfg)
    split = run_split(cfg, plan, batch)
    whole = {"micro_batch_size": len(batch.advantages), "max_tokens": None, "skip_zero_advantage": False}
    g_split, m_split = gradient(cfg, plan, batch, **split)
    g_one, m_one = gradient(cfg, plan, batch, **whole)
    parts = [world_arithmetic(ctx.plan),
             same_gradient(g_split, g_one, dtype, describe_split(cfg, batch, split)),
             normaliser(cfg, plan, batch, {"in one piece": m_one, "under the run's split": m_split}, dtype),
             zero_advantage(cfg, plan, batch, split, g_split, dtype),
             step_lowers_loss(cfg, plan, batch),
             two_ranks(ctx, cfg, plan, dtype)]
    result = combine(parts, "the run's split computes the mini-batch's gradient, with loss_agg_mode's normaliser, "
                            "and a step lowers the policy-gradient objective")
    if ctx.cfg.actor_rollout_ref.rollout.name != "hf":
        result.details.append(f"the batch was sampled by the hf engine (the update does not depend on the engine; "
                              f"the sampling check measures {ctx.cfg.actor_rollout_ref.rollout.name})")
    return result


# ---- the batch and the update --------------------------------------------------------------------------------
def describe_split(cfg, batch: TrainBatch, split: dict) -> str:
    """'N responses in k micro-batches of sizes [...]' as the update cuts this batch."""
    from hybridrl.plan.levers import MicroBatching
    from hybridrl.workers.update_loop import micro_batch_rows_of

    micro = cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    batching = MicroBatching(micro, split.get("max_tokens"))
    rows = micro_batch_rows_of(batch.seqs, batching, cfg.actor_rollout_ref.model.share_prompt_prefix)
    how = (f"token budget {batching.max_tokens}" if batching.dynamic else f"ppo_micro_batch_size_per_gpu={micro}")
    return f"{len(batch.advantages)} responses in {len(rows)} micro-batches of {[len(r) for r in rows]} ({how})"


def _compute_dtype(cfg) -> str:
    from hybridrl.plan.levers import actor_dtypes

    return actor_dtypes(cfg)[0]


# ---- the proofs ----------------------------------------------------------------------------------------------
def same_gradient(g_split: list[Tensor], g_one: list[Tensor], dtype: str, split: str) -> Result:
    rel, ratio = compare(g_split, g_one)
    line = f"{split}: gradient / single-batch gradient = {ratio:.4f}, relative error {rel:.2g} (tolerance " \
           f"{GRAD_TOL[dtype]:g}, {dtype})"
    if rel <= GRAD_TOL[dtype]:
        return passed("the run's micro-batch split gives the single-batch gradient", line)
    return failed(f"mis-scaled gradient accumulation: under the run's split the gradient is {ratio:.3g}x the "
                  f"single-batch gradient (relative error {rel:.2g})", line,
                  fix=f"a hybridrl bug in the update's per-micro-batch loss scaling (workers/policy.py, "
                      f"algos/reduce.py): report it; until fixed, one micro-batch per mini-batch "
                      f"({ACTOR}.ppo_micro_batch_size_per_gpu = ppo_mini_batch_size x rollout.n / world size, "
                      f"{ACTOR}.use_dynamic_bsz=false) avoids the accumulation")


def normaliser(cfg, plan, batch: TrainBatch, metrics: dict[str, dict], dtype: str) -> Result:
    """The update's pg_loss against loss_agg_mode's definition, on-policy (ratio 1), so the per-token loss is
    the registered policy loss at ratio 1, computed here."""
    from hybridrl.algos.policy_losses import POLICY_LOSSES
    from hybridrl.check.twin_policy import build_twin_policy

    a = cfg.actor_rollout_ref.actor
    mode = a.loss_agg_mode
    if mode not in DEFINITIONS:
        return not_applicable(f"loss_agg_mode={mode} has no definition here to compare with")
    policy, _ = build_twin_policy(cfg, plan)
    try:
        s = policy.settings
        lp = policy.log_probs(batch.seqs)  # the forward the update's ratio is 1 against
        mask = batch.seqs.response_mask.float()
        values = POLICY_LOSSES.get(s.loss_mode)(lp, lp, batch.advantages, mask, s.loss_params).loss
        if s.rollout_is is not None:
            from hybridrl.algos.rollout_correction import rollout_is_weights

            values = values * rollout_is_weights(lp, batch.rollout_log_probs, mask, s.rollout_is,
                                                 s.rollout_is_threshold)[0]
        expected = float(DEFINITIONS[mode](values.float(), mask, s.loss_scale_factor))
        # the same aggregate of |per-token loss|: the scale the rounding is relative to (the net value of terms with
        # advantages of both signs can be near 0, where a relative error says nothing)
        scale = float(DEFINITIONS[mode](values.float().abs(), mask, s.loss_scale_factor))
    finally:
        policy.close()
    lines, bad = [], []
    for how, m in metrics.items():
        got = m["actor/pg_loss"]
        rel = abs(got - expected) / max(abs(expected), scale, 1e-12)
        lines.append(f"pg_loss {how} {got:.6g}, by loss_agg_mode={mode}'s definition {expected:.6g} (relative "
                     f"error {rel:.2g})")
        if rel > LOSS_TOL[dtype] and not math.isclose(got, expected, abs_tol=1e-7):
            bad.append(f"{how} {got / expected if expected else float('inf'):.3g}x")
    if not bad:
        return passed(f"the loss normaliser is loss_agg_mode={mode}'s definition", *lines)
    return failed(f"the loss normaliser is not loss_agg_mode={mode}'s definition: the update's loss is "
                  + ", ".join(bad) + " the defined value", *lines,
                  fix=f"a hybridrl bug in algos/reduce.py's {mode} (or how the update passes its counts): report it; "
                      f"another {ACTOR}.loss_agg_mode avoids it")


def zero_advantage(cfg, plan, batch: TrainBatch, split: dict, g_split: list[Tensor], dtype: str) -> Result:
    from hybridrl.plan.levers import skips_zero_advantage, zero_advantage_note

    if not cfg.actor_rollout_ref.actor.skip_zero_advantage:
        return not_applicable(f"{ACTOR}.skip_zero_advantage is off")
    if not skips_zero_advantage(cfg):
        return not_applicable(zero_advantage_note(cfg) or "skip_zero_advantage does not apply to this run")
    g_all, _ = gradient(cfg, plan, batch, **{**split, "skip_zero_advantage": False})
    rel, ratio = compare(g_split, g_all)
    zeros = int((batch.advantages == 0).all(-1).sum())
    line = (f"{zeros} of {len(batch.advantages)} rows with advantage 0 left out: gradient / with them = {ratio:.4f}, "
            f"relative error {rel:.2g} (tolerance {GRAD_TOL[dtype]:g})")
    if rel <= GRAD_TOL[dtype]:
        return passed("leaving zero-advantage rows out leaves the gradient unchanged", line)
    return failed(f"leaving zero-advantage rows out changes the gradient ({ratio:.3g}x)", line,
                  fix=f"set {ACTOR}.skip_zero_advantage=false, and report it (the normaliser must count those rows)")


def step_lowers_loss(cfg, plan, batch: TrainBatch) -> Result:
    """One update of a fresh policy at the configured peak lr (a warm-up may start at 0), π_old frozen, lowers the
    policy-gradient objective J = agg(-A · π/π_old) on the same batch (agg: loss_agg_mode). J, not the configured
    loss's own value: every registered loss has J's gradient at ratio 1, but not all have J's value (CISPO's is
    -A · sg(clip(r)) · log π, whose value moves with the detached weight after a step). J is read as the vanilla
    loss's pg_loss from an update at lr 0 (no step; AdamW's moments then see the same gradient twice, which leaves
    its first step's direction and size as they were). Only the policy-gradient terms (no entropy, KL or
    distillation)."""
    from hybridrl.check.twin_policy import build_twin_policy

    policy, _ = build_twin_policy(cfg, plan)
    lr, mode = cfg.actor_rollout_ref.actor.optim.lr, cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    try:
        frozen = dataclasses.replace(batch, old_log_probs=policy.log_probs(batch.seqs))
        base = dataclasses.replace(policy.settings, mini_batch_size=len(batch.advantages), ppo_epochs=1,
                                   shuffle=False, entropy_coeff=0.0, use_kl_loss=False, distill_loss_mode=None)

        def update(loss_mode: str, at_lr: float) -> dict:
            policy.settings = dataclasses.replace(base, loss_mode=loss_mode)
            for group in policy.optimizer.param_groups:
                group["lr"] = at_lr
            return policy.update(frozen)

        before = update("vanilla", 0.0)["actor/pg_loss"]
        norm = update(mode, lr)["actor/grad_norm"]
        after = update("vanilla", 0.0)["actor/pg_loss"]
    finally:
        policy.close()
    line = (f"J = agg(-A·π/π_old) {before:.6g} -> {after:.6g} after one step of policy_loss.loss_mode={mode} at lr "
            f"{lr:g} (grad norm {norm:.3g})")
    if after < before:
        return passed("one optimiser step lowers the policy-gradient objective on the same batch", line)
    why = "the gradient norm is not finite, so the step was skipped" if not math.isfinite(norm) else \
        "the step went along the objective, not against it, or was too small to move it"
    return failed(f"one optimiser step did not lower the policy-gradient objective on the same batch: {why}", line,
                  fix=f"check {ACTOR}.optim.lr (and grad_clip); a finite gradient that does not lower the objective "
                      "is a hybridrl bug: report it")


def world_arithmetic(plan) -> Result:
    """The declared world's per-rank split adds up to the mini-batch: ranks x micro-batches x responses."""
    if plan is None:
        return not_applicable("no batch plan")
    w, per, micro, g = (plan.world_size, plan.mini_batch_responses_per_worker, plan.micro_batch_responses_per_worker,
                        plan.grad_accum_steps)
    line = (f"declared world {w} rank(s): a mini-batch of {plan.mini_batch_responses} responses = {w} x {per} per "
            f"rank = {w} x {g} micro-batches x {micro}")
    if w * per == plan.mini_batch_responses and g * micro == per:
        return passed("the declared world size divides every mini-batch evenly", line)
    return failed("the declared world size does not divide the mini-batch evenly", line,
                  fix=f"make {ACTOR}.ppo_mini_batch_size x rollout.n a multiple of trainer.n_gpus_per_node x "
                      f"trainer.nnodes x {ACTOR}.ppo_micro_batch_size_per_gpu")


def two_ranks(ctx, cfg, plan, dtype: str) -> Result:

    if ctx.plan is None or ctx.plan.world_size <= 1:
        return not_applicable("the declared world is 1 rank: no 2-rank run")
    return two_rank_gradient(ctx, cfg, plan, GRAD_TOL[dtype])
