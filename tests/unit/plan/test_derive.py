"""Micro-batch sizes left null are derived from the batch (and the memory estimate) instead of a fixed
default that small batches cannot divide (plan/derive.py, plan.make_batch_plan, critic_batch_plan)."""

from __future__ import annotations

import re

import pytest

from hybridrl.config.loader import load_config
from hybridrl.plan.memory import MemoryBudgetError, estimate_memory
from hybridrl.plan.memory_fixes import check_memory
from hybridrl.plan.batch_plan import make_batch_plan
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig, validate_sft_config
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.plan.roles import critic_batch_plan
from hybridrl.errors import ConfigError

A = "actor_rollout_ref.actor."
# listed after the sizes: the auto precision keys (pinned to fp32 in the tests; tests/conftest.py)
AUTO = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", "actor_rollout_ref.rollout.dtype"]


def validated(*overrides: str) -> tuple[RLConfig, object]:
    cfg = load_config(RLConfig, None, list(overrides))
    return cfg, validate_rl_config(cfg)


@pytest.mark.parametrize("overrides, micro", [
    # the case: 1 prompt x 8 samples = 8 responses, refused by the former default of 128
    (["data.train_batch_size=1", f"{A}ppo_mini_batch_size=1"], 8),
    # 6 prompts x 5 = 30 responses: 30 itself (<= 128)
    (["data.train_batch_size=6", f"{A}ppo_mini_batch_size=6", "actor_rollout_ref.rollout.n=5"], 30),
    # 20 x 8 = 160: divisors 1 2 4 5 8 10 16 20 32 40 80 160, the largest <= 128 is 80
    (["data.train_batch_size=20", f"{A}ppo_mini_batch_size=20"], 80),
    # 64 x 8 = 512: 128 (the cap divides it)
    (["data.train_batch_size=64", f"{A}ppo_mini_batch_size=64"], 128),
    # two workers: 4 x 3 = 12 responses, 6 each
    (["data.train_batch_size=4", f"{A}ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=3",
      "trainer.n_gpus_per_node=2"], 6),
])
def test_update_micro_batch_is_the_largest_divisor_of_a_workers_share_up_to_128(overrides, micro):
    cfg, plan = validated(*overrides)
    assert plan.micro_batch_responses_per_worker == micro
    assert plan.grad_accum_steps == plan.mini_batch_responses_per_worker // micro
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == micro  # every role reads the same value
    assert plan.derived[0] == (f"{A}ppo_micro_batch_size_per_gpu={micro} (the largest divisor of a worker's "
                               f"{plan.mini_batch_responses_per_worker} mini-batch responses up to 128)")


def test_an_explicit_size_that_does_not_divide_keeps_the_error_with_valid_values():
    with pytest.raises(ConfigError, match=re.escape(
            f"{A}ppo_micro_batch_size_per_gpu=128 must divide the 8 responses of a mini-batch on one worker "
            "(ppo_mini_batch_size * rollout.n / workers = 1 * 8 / 1); use one of 1, 2, 4, 8")):
        validated("data.train_batch_size=1", f"{A}ppo_mini_batch_size=1", f"{A}ppo_micro_batch_size_per_gpu=128")


def test_an_explicit_size_is_kept_and_not_listed_as_derived():
    cfg, plan = validated(f"{A}ppo_micro_batch_size_per_gpu=32", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=7")
    assert plan.micro_batch_responses_per_worker == 32
    assert not any(note.startswith(f"{A}ppo_micro") or "log_prob_micro" in note for note in plan.derived)
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 7


def test_forward_passes_take_up_to_256_and_only_used_passes_are_listed():
    cfg, plan = validated("algorithm.adv_estimator=gae", f"{A}use_kl_loss=true")
    assert (cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu,
            cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
            cfg.critic.forward_micro_batch_size_per_gpu) == (256, 256, 256)
    listed = [note.split("=")[0] for note in plan.derived]
    assert listed == [f"{A}ppo_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                      "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "critic.forward_micro_batch_size_per_gpu",
                      "critic.ppo_micro_batch_size_per_gpu", *AUTO]
    _, grpo = validated()
    assert [note.split("=")[0] for note in grpo.derived] == [
        f"{A}ppo_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", *AUTO]


def test_critic_micro_batch_follows_the_actors_but_divides_its_own_share():
    # 24 x 8 = 192 responses; the actor's micro-batch 64 (set); the critic's mini-batch of 3 prompts is 24
    # responses, which 64 cannot divide (formerly an error naming critic.ppo_micro_batch_size_per_gpu=64,
    # a key never set): derived, the largest divisor of 24 up to 64 = 24
    cfg, plan = validated("algorithm.adv_estimator=gae", "data.train_batch_size=24", f"{A}ppo_mini_batch_size=24",
                          f"{A}ppo_micro_batch_size_per_gpu=64", "critic.ppo_mini_batch_size=3")
    critic = critic_batch_plan(cfg)
    assert (critic.mini_batch_responses_per_worker, critic.micro_batch_responses_per_worker) == (24, 24)
    assert "critic.ppo_micro_batch_size_per_gpu=24 (the largest divisor of a worker's 24 mini-batch responses up to " \
           "64)" in plan.derived
    assert cfg.critic.ppo_micro_batch_size_per_gpu is None  # stays null: critic_batch_plan derives it for every role
    # the same shares: exactly the actor's value (as before)
    cfg, _ = validated("algorithm.adv_estimator=gae", f"{A}ppo_micro_batch_size_per_gpu=32")
    assert critic_batch_plan(cfg).micro_batch_responses_per_worker == 32


def test_make_batch_plan_derives_when_given_none():
    plan = make_batch_plan(train_batch_size=3, n=4, ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=None,
                           micro_cap=5)
    # 12 responses, divisors 1 2 3 4 6 12, the largest <= 5 is 4: 3 micro-batches
    assert (plan.micro_batch_responses_per_worker, plan.grad_accum_steps) == (4, 3)


def _update_total(cfg: RLConfig, plan) -> tuple[int, int]:
    (pool,) = estimate_memory(cfg, plan).pools
    (update,) = [ph for ph in pool.phases if ph.name == "policy update"]
    return pool.total(update), pool.budget


def test_memory_estimate_lowers_a_derived_micro_batch_to_the_largest_that_fits():
    """0.8 GiB per worker, no validation set: the default run's update at 128 responses does not fit (0.84 GiB
    with the process itself), at 64 it does (0.69; both read off the estimate itself below); so the derived size
    is 64, and the plan says why. Set by hand to 128, the same config is refused by check_memory, proposing 64."""
    cfg, plan = validated("trainer.memory_per_worker_gb=0.8", "data.val_files=[]")
    assert plan.micro_batch_responses_per_worker == 64
    total, budget = _update_total(cfg, plan)
    assert total <= budget
    big_cfg = load_config(RLConfig, None, [f"{A}ppo_micro_batch_size_per_gpu=128", "trainer.memory_per_worker_gb=0.8",
                                           "data.val_files=[]"])
    big_plan = validate_rl_config(big_cfg)
    assert _update_total(big_cfg, big_plan)[0] > budget
    assert f"{A}ppo_micro_batch_size_per_gpu=64 (lowered to fit the memory estimate; `hybridrl plan` shows it)" \
        in plan.derived
    check_memory(cfg, plan)  # the derived config passes the check that refuses the explicit one
    with pytest.raises(MemoryBudgetError, match=re.escape(f"or with {A}ppo_micro_batch_size_per_gpu=64")):
        check_memory(big_cfg, big_plan)


def test_plan_describe_lists_the_derived_values():
    _, plan = validated("data.train_batch_size=1", f"{A}ppo_mini_batch_size=1")
    text = plan.describe()
    assert "  per worker (1): 8 responses per mini-batch = 1 micro-batch(es) of 8\n" in text
    assert ("  derived (keys left null or auto):\n    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 (the largest "
            "divisor of a worker's 8 mini-batch responses up to 128)\n") in text


@pytest.mark.parametrize("batch, micro", [(8, 8), (96, 48), (7, 7), (128, 64)])
def test_sft_micro_batch_is_derived_from_the_batch(batch, micro):
    cfg = load_config(SFTConfig, None, [f"data.train_batch_size={batch}"])
    (note,) = validate_sft_config(cfg)
    assert cfg.data.micro_batch_size_per_gpu == micro
    assert note == (f"data.micro_batch_size_per_gpu={micro} (derived: the largest divisor of "
                    f"data.train_batch_size={batch} up to 64)")


def test_sft_explicit_micro_batch_that_does_not_divide_lists_divisors():
    cfg = load_config(SFTConfig, None, ["data.train_batch_size=12", "data.micro_batch_size_per_gpu=5"])
    with pytest.raises(ConfigError, match=re.escape("data.micro_batch_size_per_gpu=5 must divide "
                                                    "data.train_batch_size=12; use one of 1, 2, 3, 4, 6, 12 (or null "
                                                    "to derive it)")):
        validate_sft_config(cfg)
