"""Responses that carry no gradient (`actor_rollout_ref.actor.skip_zero_advantage`).

A GRPO-family group whose rewards are all equal has advantage 0 on every token of every response
(GRPO, Dr.GRPO, RLOO, ... subtract the group's own baseline). Every registered policy loss is
-A times a factor that does not depend on A (`zero_at_zero_advantage` in the registry), so such a
response adds exactly 0 to the policy-gradient loss and to its gradient, whatever its ratio. With
no entropy bonus, no KL loss and no distillation loss, nothing else in the loss reads it: its forward and backward are
wasted work. The loss normaliser (algos/reduce.py: tokens or responses of the whole mini-batch)
is taken before those rows leave, so the update is the one computed with them.

Feasibility runs on the default arithmetic task saw 46 % of groups with zero variance at the start
and 65-70 % at the plateau (issue #23): most of an update's compute, late in a run.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from hybridrl.algos.policy_losses import POLICY_LOSSES


def rows_with_signal(advantages: Tensor, mask: Tensor) -> Tensor:
    """advantages, mask: [N, T] -> bool [N], True where some response token has a non-zero advantage
    (a NaN counts as non-zero: such a row is kept, and fails where it always did)."""
    return ((advantages != 0) & mask.bool()).any(-1)


def why_not_exact(loss_mode: str, entropy_coeff: float, use_kl_loss: bool, distill: bool = False) -> Optional[str]:
    """None when leaving zero-advantage responses out leaves the update unchanged; else the reason, naming
    the key, why those responses must stay in the update."""
    if entropy_coeff:
        return "actor_rollout_ref.actor.entropy_coeff > 0: the entropy bonus has a gradient on every response"
    if use_kl_loss:
        return "actor_rollout_ref.actor.use_kl_loss=true: the KL loss has a gradient on every response"
    if distill:
        return "distillation.enabled=true: the distillation loss has a gradient on every response"
    if not POLICY_LOSSES.entry(loss_mode).meta.get("zero_at_zero_advantage"):
        return f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} may have a gradient where the advantage is 0"
    return None
