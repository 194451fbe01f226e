"""make_batch_plan and total_training_steps: verl batch-size keys -> per-worker sizes, with hand-computed values."""

from __future__ import annotations

import re

import pytest

from hybridrl.plan.batch_plan import BatchPlan, make_batch_plan, total_training_steps
from hybridrl.errors import ConfigError


def test_off_policy_plan_values_by_hand():
    plan = make_batch_plan(train_batch_size=16, n=8, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=8,
                           ppo_epochs=2, world_size=2)
    # 16 prompts x 8 samples = 128 responses per step
    assert plan.responses_per_step == 128
    # a mini-batch is 4 prompts x 8 samples = 32 responses
    assert plan.mini_batch_responses == 32
    # 16 / 4 = 4 mini-batches per epoch, x 2 epochs = 8 optimizer steps per step
    assert plan.mini_batches_per_epoch == 4
    assert plan.optimizer_steps_per_step == 8
    # 32 responses over 2 workers = 16 per worker; 16 / micro 8 = 2 micro-batches (grad accumulation)
    assert plan.mini_batch_responses_per_worker == 16
    assert plan.micro_batch_responses_per_worker == 8
    assert plan.grad_accum_steps == 2
    assert plan.on_policy is False
    assert (plan.world_size, plan.prompts_per_step, plan.n, plan.ppo_epochs) == (2, 16, 8, 2)


def test_on_policy_plan_when_one_mini_batch_and_one_epoch():
    plan = make_batch_plan(train_batch_size=16, n=8, ppo_mini_batch_size=16, ppo_micro_batch_size_per_gpu=32)
    # 16 x 8 = 128 responses, one mini-batch of 128, 1 epoch -> 1 optimizer step; 128 / 32 = 4 micro-batches
    assert plan == BatchPlan(world_size=1, prompts_per_step=16, n=8, responses_per_step=128,
                             mini_batch_responses=128, mini_batches_per_epoch=1, ppo_epochs=1,
                             mini_batch_responses_per_worker=128, micro_batch_responses_per_worker=32,
                             grad_accum_steps=4)
    assert plan.optimizer_steps_per_step == 1
    assert plan.on_policy is True


def test_one_mini_batch_but_two_epochs_is_not_on_policy():
    plan = make_batch_plan(train_batch_size=4, n=2, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=8,
                           ppo_epochs=2)
    assert plan.optimizer_steps_per_step == 2
    assert plan.on_policy is False


@pytest.mark.parametrize("kwargs, key, value", [
    (dict(train_batch_size=0), "data.train_batch_size", 0),
    (dict(n=0), "actor_rollout_ref.rollout.n", 0),
    (dict(ppo_mini_batch_size=-1), "actor_rollout_ref.actor.ppo_mini_batch_size", -1),
    (dict(ppo_micro_batch_size_per_gpu=0), "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 0),
    (dict(ppo_epochs=0), "actor_rollout_ref.actor.ppo_epochs", 0),
    (dict(world_size=0), "trainer.n_gpus_per_node * trainer.nnodes", 0),
])
def test_value_below_one_names_the_key(kwargs, key, value):
    args = dict(train_batch_size=4, n=2, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=2, ppo_epochs=1,
                world_size=1)
    args.update(kwargs)
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}={value} must be at least 1$"):
        make_batch_plan(**args)


def test_mini_batch_larger_than_batch_proposes_divisors():
    # divisors of 12: 1 2 3 4 6 12; nearest 20: 12 (8), 6 (14), 4 (16), 3 (17) -> sorted 3, 4, 6, 12
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.ppo_mini_batch_size=20 is larger than data.train_batch_size=12 "
            "(both count prompts); set it to at most 12, e.g. one of 3, 4, 6, 12")):
        make_batch_plan(train_batch_size=12, n=2, ppo_mini_batch_size=20, ppo_micro_batch_size_per_gpu=1)


def test_mini_batch_not_dividing_batch_lists_nearest_divisors():
    # divisors of 12: 1 2 3 4 6 12; distance to 5: 4->1, 6->1, 3->2, 2->3, 1->4, 12->7 -> 2, 3, 4, 6
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.ppo_mini_batch_size=5 does not divide data.train_batch_size=12; "
            "use one of 2, 3, 4, 6")) as info:
        make_batch_plan(train_batch_size=12, n=2, ppo_mini_batch_size=5, ppo_micro_batch_size_per_gpu=1)
    assert str(info.value).endswith("use one of 2, 3, 4, 6")


def test_mini_batch_responses_not_divisible_by_world_size():
    # 1 prompt x 3 samples = 3 responses, not splittable over 2 workers
    with pytest.raises(ConfigError, match=re.escape(
            "a mini-batch holds ppo_mini_batch_size * rollout.n = 1 * 3 = 3 responses, which do not split "
            "evenly over 2 workers; change actor_rollout_ref.actor.ppo_mini_batch_size or "
            "trainer.n_gpus_per_node * trainer.nnodes so that 2 divides it")):
        make_batch_plan(train_batch_size=4, n=3, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1,
                        world_size=2)
    # the critic in its own pool: the error names the key that sets that pool's size
    with pytest.raises(ConfigError, match=re.escape("change critic.ppo_mini_batch_size or critic.n_workers so that 2")):
        make_batch_plan(train_batch_size=4, n=3, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1,
                        world_size=2, role="critic", world_key="critic.n_workers")


def test_micro_batch_not_dividing_per_worker_mini_batch_proposes_divisors():
    # per worker: 6 x 8 / 2 = 24; divisors 1 2 3 4 6 8 12 24; distance to 5: 4->1, 6->1, 3->2, 2->3, 8->3
    # ties broken by the smaller divisor -> 4, 6, 3, 2 -> sorted 2, 3, 4, 6
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5 must divide the 24 responses of a mini-batch "
            "on one worker (ppo_mini_batch_size * rollout.n / workers = 6 * 8 / 2); use one of 2, 3, 4, 6")):
        make_batch_plan(train_batch_size=12, n=8, ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=5,
                        world_size=2)


def test_micro_batch_larger_than_per_worker_mini_batch_proposes_divisors():
    # per worker: 4 x 8 / 2 = 16; divisors 1 2 4 8 16; nearest 32: 16, 8, 4, 2 -> sorted 2, 4, 8, 16
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 must divide the 16 responses of a mini-batch "
            "on one worker (ppo_mini_batch_size * rollout.n / workers = 4 * 8 / 2); use one of 2, 4, 8, 16")):
        make_batch_plan(train_batch_size=16, n=8, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=32,
                        world_size=2)


def test_describe_contains_the_numbers():
    text = make_batch_plan(train_batch_size=16, n=8, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=8,
                           ppo_epochs=2, world_size=2).describe()
    assert text.splitlines() == [
        "batch plan:",
        "  16 prompts x 8 samples = 128 responses per step",
        "  4 mini-batch(es) of 32 responses x 2 epoch(s) = 8 optimizer step(s) per step",
        "  per worker (2): 16 responses per mini-batch = 2 micro-batch(es) of 8",
        "  old log-probs: recomputed before the update",
    ]


def test_describe_on_policy():
    text = make_batch_plan(train_batch_size=16, n=8, ppo_mini_batch_size=16, ppo_micro_batch_size_per_gpu=128).describe()
    assert "1 mini-batch(es) of 128 responses x 1 epoch(s) = 1 optimizer step(s) per step" in text
    assert "per worker (1): 128 responses per mini-batch = 1 micro-batch(es) of 128" in text
    assert "taken from the update's first forward (on-policy)" in text


# --- total_training_steps ------------------------------------------------------------------


def test_total_steps_override_wins():
    assert total_training_steps(num_prompts=100, train_batch_size=16, total_epochs=3, override=5) == 5


def test_total_steps_drops_last_partial_batch_times_epochs():
    # 100 // 16 = 6 full batches per epoch (4 prompts dropped), x 3 epochs = 18
    assert total_training_steps(num_prompts=100, train_batch_size=16, total_epochs=3, override=None) == 18


def test_total_steps_exact_fit():
    # 32 // 16 = 2 per epoch, x 1 = 2
    assert total_training_steps(num_prompts=32, train_batch_size=16, total_epochs=1, override=None) == 2


def test_total_steps_too_few_prompts_proposes_batch_size():
    with pytest.raises(ConfigError, match=re.escape(
            "the training set has 10 prompts, fewer than data.train_batch_size=16; "
            "lower data.train_batch_size to at most 10 or add prompts")):
        total_training_steps(num_prompts=10, train_batch_size=16, total_epochs=1, override=None)


def test_total_steps_override_below_one():
    with pytest.raises(ConfigError, match=re.escape("trainer.total_training_steps=0 must be at least 1 (or null)")):
        total_training_steps(num_prompts=100, train_batch_size=16, total_epochs=1, override=0)


def test_total_epochs_below_one():
    with pytest.raises(ConfigError, match=re.escape("trainer.total_epochs=0 must be at least 1")):
        total_training_steps(num_prompts=100, train_batch_size=16, total_epochs=0, override=None)
