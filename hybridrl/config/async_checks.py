"""The rules that tie asynchronous training's keys (config/schema_async.py) to the rest of the config.

Async mode needs the Ray backend (the rollout pool is worker processes), one whole engine per rollout worker
(hf, or vllm without partial rollouts), and, where batches can be older than the trainer's weights, an explicit
choice of the behaviour policy: samples of older weights are never trained on as if on-policy.
"""

from __future__ import annotations

import math

from hybridrl.config.schema import RLConfig
from hybridrl.config.schema_async import AsyncTrainingConfig
from hybridrl.errors import ConfigError, raise_all


def async_enabled(cfg: RLConfig) -> bool:
    return cfg.rollout.n_gpus_per_node * cfg.rollout.nnodes > 0


def rollout_workers(cfg: RLConfig) -> int:
    return cfg.rollout.n_gpus_per_node * cfg.rollout.nnodes


def batches_per_sync(a: AsyncTrainingConfig) -> int:
    """verl's bound at batch granularity: between two weight pushes the rollout pool generates at most
    floor((1 + staleness_threshold) x trigger_parameter_sync_step) batches (the epsilon absorbs 0.1 + 1 style
    float error)."""
    return math.floor((1 + a.staleness_threshold) * a.trigger_parameter_sync_step + 1e-9)


def may_be_stale(a: AsyncTrainingConfig) -> bool:
    """Can a batch come from weights older than the trainer's at its update? Only staleness 0 with a push after
    every step is synchronous."""
    return batches_per_sync(a) > 1


def check_async(cfg: RLConfig) -> None:
    """Every problem of the async keys at once (ConfigErrors)."""
    r, a = cfg.rollout, cfg.async_training
    if not async_enabled(cfg):
        if r.n_gpus_per_node or r.nnodes:
            raise ConfigError(f"rollout.n_gpus_per_node={r.n_gpus_per_node} x rollout.nnodes={r.nnodes} is a rollout "
                              "pool of 0 workers; set both > 0 for asynchronous training, or both 0")
        if a != AsyncTrainingConfig():
            raise ConfigError("async_training.* is set but there is no rollout pool, so training is synchronous and "
                              "the keys would do nothing; set rollout.n_gpus_per_node and rollout.nnodes > 0, or "
                              "remove the async_training keys")
        return
    errors, rc = [], cfg.algorithm.rollout_correction
    where = (f"rollout.n_gpus_per_node * rollout.nnodes = {rollout_workers(cfg)} rollout workers (asynchronous "
             "training)")
    if cfg.trainer.backend != "ray":
        errors.append(f"{where} run as Ray worker processes; set trainer.backend=ray")
    name, tp = cfg.actor_rollout_ref.rollout.name, cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
    if name == "vllm" and a.partial_rollout:
        # a push landing mid-generation would need vLLM to abort the running requests and resume them from their
        # tokens so far under the new weights; that is not built (the hf decode loop takes pushes between tokens)
        errors.append("async_training.partial_rollout=true with actor_rollout_ref.rollout.name=vllm: a weight push "
                      "cannot reach a vLLM generation in flight (it would need abort + resume of its requests, not "
                      "built); set async_training.partial_rollout=false or actor_rollout_ref.rollout.name=hf")
    if tp > 1:
        # one engine over several rollout workers would need them in one process group (vLLM's external launcher);
        # rollout workers have none
        errors.append(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} with {where}: a rollout worker "
                      "holds one whole engine (the pool has no process group for an engine over several workers); "
                      "set actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    if a.partial_rollout and batches_per_sync(a) <= a.trigger_parameter_sync_step:
        # verl accepts it and nothing happens; a key that silently does nothing is refused here instead
        errors.append(f"async_training.partial_rollout=true with staleness_threshold={a.staleness_threshold:g}: no "
                      "generation is ever in flight at a weight push (each window's batches are taken before the "
                      "next push), so it would do nothing; set async_training.staleness_threshold > 0 (e.g. 1) or "
                      "async_training.partial_rollout=false")
    if cfg.algorithm.filter_groups.enable:
        errors.append(f"algorithm.filter_groups.enable=true generates a data-dependent number of rounds per step, "
                      f"which {where} cannot schedule ahead; set algorithm.filter_groups.enable=false or "
                      "rollout.n_gpus_per_node=0")
    if cfg.actor_rollout_ref.rollout.multi_turn.enable:
        errors.append(f"actor_rollout_ref.rollout.multi_turn.enable=true with {where} is not supported yet; "
                      "set rollout.n_gpus_per_node=0")
    if may_be_stale(a) and a.use_rollout_log_probs == a.compute_prox_log_prob:
        errors.append(f"async_training.staleness_threshold={a.staleness_threshold:g} with trigger_parameter_sync_step="
                      f"{a.trigger_parameter_sync_step} trains on batches of older weights, so pi_old must be chosen: "
                      "set exactly one of async_training.use_rollout_log_probs=true (pi_old = the rollout's log-probs) "
                      "and async_training.compute_prox_log_prob=true (recompute it, AReaL's decoupled PPO)")
    elif may_be_stale(a) and a.use_rollout_log_probs and rc.rollout_rs is not None:
        # pi_old IS the behaviour policy on a lagged batch: pi_old / pi_rollout = 1, nothing would ever be rejected
        errors.append(f"algorithm.rollout_correction.rollout_rs={rc.rollout_rs} with async_training.use_rollout_log_probs"
                      "=true: on a lagged batch pi_old is the rollout's own log-probs, so the rejection band compares "
                      "them with themselves and rejects nothing; set async_training.use_rollout_log_probs=false and "
                      "async_training.compute_prox_log_prob=true (pi_old recomputed), or remove rollout_rs")
    elif may_be_stale(a) and a.compute_prox_log_prob and rc.rollout_is is None and rc.rollout_rs is None:
        errors.append("async_training.compute_prox_log_prob=true recomputes pi_old, so the behaviour -> pi_old gap "
                      "needs a correction; set algorithm.rollout_correction.rollout_is=token (or rollout_rs), or use "
                      "async_training.use_rollout_log_probs=true")
    raise_all(errors)
