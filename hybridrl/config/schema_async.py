"""Asynchronous training's config sections, under verl's fully-async recipe names
(recipe/fully_async_policy): the top-level `rollout` section sizes a rollout pool apart from the
training pool, and `async_training` bounds how far generation may run ahead of training.

Async mode is on when `rollout.n_gpus_per_node * rollout.nnodes > 0` (config/async_checks.py holds the
rules that tie these keys to the rest; trainer/async_rollout.py runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import doc


@dataclass
class RolloutPoolConfig:
    """verl's top-level `rollout:` section of the fully-async recipe (not actor_rollout_ref.rollout)."""

    nnodes: int = doc(0, "nodes of the separate rollout pool (backend=ray); rollout.n_gpus_per_node * rollout.nnodes "
                         "> 0 turns asynchronous training on", ge=0, hint="(0: no rollout pool, synchronous training)")
    n_gpus_per_node: int = doc(0, "rollout workers per node, each generating with its own copy of the weights "
                                  "(on cpu: worker processes)", ge=0, hint="(0: no rollout pool)")


@dataclass
class AsyncTrainingConfig:
    """How far the rollout pool may run ahead of the trainer (verl's async_training section)."""

    staleness_threshold: float = doc(0.0, "between two weight syncs the rollout pool generates at most (1 + this) x "
                                          "trigger_parameter_sync_step batches (rounded down): 0 is synchronous, 1 "
                                          "one-step-off", ge=0, hint="(0: synchronous; 1: one step off)")
    trigger_parameter_sync_step: int = doc(1, "push the trainer's weights to the rollout pool every N optimizer "
                                              "steps", ge=1)
    partial_rollout: bool = doc(False, "a weight push interrupts the generation in flight at its next decode step, "
                                       "which continues with the new weights (each token keeps its own log-prob and "
                                       "version); needs staleness_threshold > 0")
    use_rollout_log_probs: bool = doc(True, "off-policy batches: pi_old is the rollout's own log-probs (the "
                                            "behaviour policy), so PPO clips pi/pi_rollout (verl's default)")
    compute_prox_log_prob: bool = doc(False, "off-policy batches: recompute pi_old on the trainer (AReaL's decoupled "
                                             "PPO, arXiv 2505.24298) and correct behaviour -> pi_old with "
                                             "algorithm.rollout_correction.rollout_is / rollout_rs")
    require_batches: int = doc(1, "batches the trainer takes per optimizer step (only 1 here)", ge=1, le=1,
                               hint="(hybridrl takes one batch per step)")
