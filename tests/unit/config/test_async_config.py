"""Asynchronous training's keys (config/schema_async.py) and the rules in config/async_checks.py."""

from __future__ import annotations

import importlib.util

import pytest

from hybridrl.config.async_checks import batches_per_sync
from hybridrl.config.schema_async import AsyncTrainingConfig
from hybridrl.plan.resolve import load_rl_config
from hybridrl.errors import ConfigError

POOL = ["rollout.n_gpus_per_node=1", "rollout.nnodes=1", "trainer.backend=ray"]


@pytest.mark.parametrize("staleness, trigger, batches", [(0, 1, 1), (1, 1, 2), (0, 2, 2), (0.5, 2, 3), (0.1, 10, 11),
                                                         (0.3, 10, 13), (0.49, 2, 2)])
def test_batches_per_sync_window_follow_verls_bound(staleness, trigger, batches):
    # floor((1 + s) x T): 1.1 x 10 is 11.000000000000002 and 1.3 x 10 is 13.000000000000002 in floats
    a = AsyncTrainingConfig(staleness_threshold=staleness, trigger_parameter_sync_step=trigger)
    assert batches_per_sync(a) == batches


def test_a_valid_one_step_off_config_loads():
    cfg, _ = load_rl_config(None, [*POOL, "async_training.staleness_threshold=1"])
    assert cfg.async_training.use_rollout_log_probs and cfg.rollout.n_gpus_per_node == 1


@pytest.fixture
def vllm_found(monkeypatch):
    """validate's vLLM check only asks whether the package is there: these tests hold where it is not installed."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else find_spec(name, *a))


VLLM = [*POOL, "actor_rollout_ref.rollout.name=vllm"]


def test_a_vllm_rollout_pool_loads(vllm_found):
    cfg, _ = load_rl_config(None, [*VLLM, "async_training.staleness_threshold=1"])
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.rollout.n_gpus_per_node == 1


@pytest.mark.parametrize("extra, message", [
    (["async_training.partial_rollout=true", "async_training.staleness_threshold=1"],
     "partial_rollout=true with actor_rollout_ref.rollout.name=vllm: a weight push cannot reach a vLLM generation in "
     r"flight \(it would need abort \+ resume"),
    (["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"],
     r"tensor_model_parallel_size=2 with rollout\.n_gpus_per_node .* a rollout worker holds one whole engine"),
])
def test_what_a_vllm_rollout_pool_cannot_do_is_refused_with_the_reason(vllm_found, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_rl_config(None, [*VLLM, *extra])


def test_partial_rollouts_load_where_a_generation_can_be_in_flight_at_a_push():
    cfg, _ = load_rl_config(None, [*POOL, "async_training.staleness_threshold=0.5",
                                   "async_training.partial_rollout=true", "async_training.trigger_parameter_sync_step=2"])
    assert cfg.async_training.partial_rollout


@pytest.mark.parametrize("extra, message", [
    (["rollout.n_gpus_per_node=1", "rollout.nnodes=1", "trainer.backend=local"], "set trainer.backend=ray"),
    (["rollout.n_gpus_per_node=2"], "rollout.n_gpus_per_node=2 x rollout.nnodes=0 is a rollout pool of 0 workers"),
    (["async_training.staleness_threshold=1"], r"async_training\.\* is set but there is no rollout pool"),
    ([*POOL, "async_training.partial_rollout=true"], "no generation is ever in flight at a weight push"),
    ([*POOL, "async_training.partial_rollout=true", "async_training.trigger_parameter_sync_step=2",
      "async_training.compute_prox_log_prob=true", "algorithm.rollout_correction.rollout_is=token"],
     "partial_rollout=true with staleness_threshold=0: no generation"),
    ([*POOL, "algorithm.filter_groups.enable=true"], "filter_groups.enable=true generates a data-dependent number"),
    ([*POOL, "async_training.staleness_threshold=1", "async_training.use_rollout_log_probs=false"],
     "so pi_old must be chosen: set exactly one of"),
    ([*POOL, "async_training.trigger_parameter_sync_step=2", "async_training.compute_prox_log_prob=true"],
     "so pi_old must be chosen"),
    ([*POOL, "async_training.staleness_threshold=1", "async_training.use_rollout_log_probs=false",
      "async_training.compute_prox_log_prob=true"], "needs a correction; set algorithm.rollout_correction.rollout_is"),
    ([*POOL, "async_training.staleness_threshold=1", "algorithm.rollout_correction.rollout_rs=token"],
     "compares them with themselves and rejects nothing"),
    ([*POOL, "async_training.require_batches=2"], "async_training.require_batches"),
    ([*POOL, "rollout.total_rollout_steps=100"], "the fully-async rollouter's own sample budget"),
    ([*POOL, "async_training.staleness=1"], "did you mean 'async_training.staleness_threshold'"),
])
def test_what_async_training_cannot_do_is_refused_naming_the_keys(extra, message):
    with pytest.raises(ConfigError, match=message):
        load_rl_config(None, extra)


def test_staleness_0_with_a_push_every_step_needs_no_pi_old_choice():
    # synchronous: every batch comes from the trainer's current weights, so neither key matters
    load_rl_config(None, [*POOL, "async_training.use_rollout_log_probs=false"])
