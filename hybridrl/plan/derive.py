"""Micro-batch sizes left null, derived once right after validation, by plan/resolve.py (verl requires every one
of them, or dynamic batch sizes; we derive them instead, so that the defaults fit any batch):

- the policy update's (actor.ppo_micro_batch_size_per_gpu): the largest divisor of a worker's
  mini-batch share up to MICRO_CAP (plan/batch_plan.py);
- the critic update's (critic.ppo_micro_batch_size_per_gpu): the largest divisor of the critic's
  share up to the policy's value (critic_batch_plan; it stays null in the config);
- the no-gradient forwards' (rollout.log_prob_*, ref.log_prob_*, critic.forward_*): FORWARD_CAP
  responses (a forward needs no divisor: a worker's rows go in chunks of at most that many);

then each lowered, where the memory estimate (plan/memory.py) says its phase would not fit, to the
largest value that fits. The values are written into the config (so every role, local or Ray, reads
the same) and listed in the batch plan's `derived` notes; a size the user set is never changed.
"""

from __future__ import annotations

import dataclasses
import functools

from hybridrl.plan.memory_fixes import fit_derived
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.plan.roles import actor_plan, critic_batch_plan
from hybridrl.config.schema import RLConfig

FORWARD_CAP = 256  # most responses per no-gradient forward when the size is derived (the former default)
ACTOR_MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
CRITIC_MICRO = "critic.ppo_micro_batch_size_per_gpu"
FORWARD_KEYS = ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "critic.forward_micro_batch_size_per_gpu")


def _get(cfg: RLConfig, key: str):
    return functools.reduce(getattr, key.split("."), cfg)


def _set(cfg: RLConfig, key: str, value) -> None:
    *path, last = key.split(".")
    setattr(functools.reduce(getattr, path, cfg), last, value)


def derive_micro_batches(cfg: RLConfig, uses_critic: bool, uses_reference: bool,
                         precision_notes: tuple[str, ...] = ()) -> BatchPlan:
    """Fill in every null micro-batch size of `cfg` (in place, see the module doc) and return the
    policy's batch plan, whose `derived` notes name each derived value of a pass the run has, and why, then
    `precision_notes` (the `auto` precision keys plan/resolve.py resolved: plan/precision_auto.py)."""
    plan = actor_plan(cfg)
    notes: dict[str, str] = {}  # key -> `key=value (why)`
    if _get(cfg, ACTOR_MICRO) is None:
        notes[ACTOR_MICRO] = plan.derived[0]
        _set(cfg, ACTOR_MICRO, plan.micro_batch_responses_per_worker)
    log_probs, ref, values = FORWARD_KEYS
    for key, used in ((log_probs, True), (ref, uses_reference), (values, uses_critic)):
        if _get(cfg, key) is None:
            _set(cfg, key, FORWARD_CAP)  # set even when unused, so that every role reads a number
            if used:
                notes[key] = f"{key}={FORWARD_CAP} (at most {FORWARD_CAP} responses per forward)"
    if uses_critic and cfg.critic.ppo_micro_batch_size_per_gpu is None:
        notes[CRITIC_MICRO] = critic_batch_plan(cfg).derived[0]
    for key, value in fit_derived(cfg, set(notes)).items():  # a size the user set is left to check_memory
        _set(cfg, key, value)
        notes[key] = f"{key}={value} (lowered to fit the memory estimate; `hybridrl plan` shows it)"
    return dataclasses.replace(actor_plan(cfg), derived=tuple(notes.values()) + tuple(precision_notes))
