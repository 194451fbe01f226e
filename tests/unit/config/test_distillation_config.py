"""distillation.*: the checks that tie its keys together, the zero-advantage note, the placement and the
teacher in `hybridrl plan`'s memory estimate."""

from __future__ import annotations

import pytest

from hybridrl.plan.levers import skips_zero_advantage, zero_advantage_note
from hybridrl.config.loader import load_config
from hybridrl.plan.memory import estimate_memory
from hybridrl.plan.placement import describe_placement, pool_roles, pool_sizes
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError

ON = ("distillation.enabled=true", "distillation.teacher_model.model_path=tiny-arith")


def config(*overrides: str) -> RLConfig:
    cfg = load_config(RLConfig, None, list(overrides))
    validate_rl_config(cfg)
    return cfg


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        config(*overrides)
    return str(e.value)


def test_enabled_needs_a_teacher():
    assert "distillation.enabled=true needs a teacher: set distillation.teacher_model.model_path" in \
        refused("distillation.enabled=true")


def test_a_teacher_without_enabled_is_refused():
    msg = refused("distillation.teacher_model.model_path=tiny-arith")
    assert "distillation.teacher_model.model_path=tiny-arith is set but distillation.enabled=false" in msg


def test_k1_is_refused_as_a_loss_and_an_unknown_estimator_lists_the_valid_ones():
    assert "k1's gradient" in refused(*ON, "distillation.distillation_loss.loss_mode=k1")
    msg = refused(*ON, "distillation.distillation_loss.loss_mode=k9")
    assert "distillation.distillation_loss.loss_mode" in msg and "k3" in msg


def test_pure_distillation_with_a_zero_coefficient_trains_nothing():
    msg = refused(*ON, "distillation.distillation_loss.use_task_rewards=false",
                  "distillation.distillation_loss.distillation_loss_coef=0")
    assert "leaves nothing to train" in msg
    config(*ON, "distillation.distillation_loss.use_task_rewards=false")  # coefficient 1: valid


def test_every_problem_at_once():
    msg = refused("distillation.enabled=true", "distillation.distillation_loss.loss_mode=k1")
    assert "needs a teacher" in msg and "k1's gradient" in msg


def test_skipping_zero_advantage_rows_is_not_exact_with_a_distillation_loss():
    plain = config("actor_rollout_ref.actor.skip_zero_advantage=true")
    assert skips_zero_advantage(plain) and zero_advantage_note(plain) is None
    cfg = config(*ON, "actor_rollout_ref.actor.skip_zero_advantage=true")
    assert not skips_zero_advantage(cfg)
    assert "distillation.enabled=true: the distillation loss has a gradient on every response" in zero_advantage_note(cfg)


def test_the_teacher_is_placed_and_counted_in_the_memory_estimate():
    base, cfg = config(), config(*ON)
    assert "distillation teacher" in describe_placement(cfg) and "teacher" not in describe_placement(base)
    actor_base = estimate_memory(base, validate_rl_config(base)).pools[0]
    actor = estimate_memory(cfg, validate_rl_config(cfg)).pools[0]
    assert "teacher log-probs" in [ph.name for ph in actor.phases]
    # tiny-arith's weights in fp32 once more on the actor worker (the teacher is a copy of the policy here)
    assert actor.resident["teacher weights"] == actor.resident["policy weights"] > 0
    assert "teacher weights" not in actor_base.resident


POOL = ("distillation.enable_resource_pool=true", "distillation.n_gpus_per_node=1", "distillation.nnodes=1")


def test_the_teacher_gets_its_own_ray_pool_when_asked():
    beside = config(*ON, "trainer.backend=ray", "trainer.n_gpus_per_node=2")
    assert pool_roles(beside) == {"actor": ("policy", "teacher")} and pool_sizes(beside) == {"actor": 2}
    own = config(*ON, *POOL, "trainer.backend=ray", "trainer.n_gpus_per_node=2")
    assert pool_roles(own) == {"actor": ("policy",), "teacher": ("teacher",)}
    assert pool_sizes(own) == {"actor": 2, "teacher": 1}
    assert "teacher pool: 1 worker(s), inference only" in describe_placement(own)
    pools = {p.name: p for p in estimate_memory(own, validate_rl_config(own)).pools}
    assert "teacher weights" in pools["teacher"].resident and "teacher weights" not in pools["actor"].resident


@pytest.mark.parametrize("overrides, message", [
    (POOL, "distillation.enable_resource_pool=true but distillation.enabled=false"),
    ((*ON, *POOL), "distillation.enable_resource_pool=true puts the teacher in its own worker processes, which needs "
                   "trainer.backend=ray"),
    ((*ON, "distillation.enable_resource_pool=true", "trainer.backend=ray"),
     "distillation.enable_resource_pool=true needs distillation.n_gpus_per_node >= 1 and distillation.nnodes >= 1"),
])
def test_teacher_pool_checks(overrides, message):
    assert message in refused(*overrides)


def test_k1_is_the_reward_of_the_policy_gradient_mode_and_other_rewards_warn():
    from hybridrl.plan.resolve import config_warnings

    pg = config(*ON, "distillation.distillation_loss.use_policy_gradient=true", "distillation.distillation_loss.loss_mode=k1")
    assert config_warnings(pg) == []
    k3 = config(*ON, "distillation.distillation_loss.use_policy_gradient=true")
    (warning,) = config_warnings(k3)
    assert "use_policy_gradient=true with loss_mode=k3" in warning and "set loss_mode=k1" in warning
    assert config_warnings(config(*ON)) == []  # k3 as a loss: no warning
