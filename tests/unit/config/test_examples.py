"""Every example config loads, validates, and sets what its comment says."""

import glob
import os

import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config

EXAMPLES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../../examples/*.yaml")))


def test_there_are_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_loads_and_validates(path):
    cfg = load_config(RLConfig, path)
    validate_rl_config(cfg)
    assert cfg.trainer.experiment_name == os.path.basename(path)[: -len(".yaml")]


def test_kl_example_turns_the_kl_loss_on():
    cfg = load_config(RLConfig, [p for p in EXAMPLES if p.endswith("grpo_kl.yaml")][0])
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.01


def test_ppo_example_uses_a_critic_and_dapo_example_filters_groups():
    by_name = {os.path.basename(p): p for p in EXAMPLES}
    ppo = load_config(RLConfig, by_name["arithmetic_ppo.yaml"])
    assert ppo.algorithm.adv_estimator == "gae" and ppo.critic.optim.lr == 1e-4
    dapo = load_config(RLConfig, by_name["arithmetic_dapo.yaml"])
    assert dapo.algorithm.filter_groups.enable and dapo.reward_model.overlong_buffer.enable
    assert dapo.actor_rollout_ref.actor.clip_ratio_high == 0.28
    drgrpo = load_config(RLConfig, by_name["arithmetic_drgrpo.yaml"])
    assert drgrpo.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"


def test_distillation_example_distils_alone_from_its_teacher():
    path = os.path.join(os.path.dirname(__file__), "../../../examples/distill_arith/distill.yaml")
    # run.sh writes the teacher first; here the bundled model stands in for it
    cfg = load_config(RLConfig, path, ["distillation.teacher_model.model_path=tiny-arith"])
    validate_rl_config(cfg)
    d = cfg.distillation
    assert d.enabled and d.distillation_loss.loss_mode == "k3+" and not d.distillation_loss.use_task_rewards
    assert load_config(RLConfig, path).distillation.teacher_model.model_path == "build/distill_arith/teacher"


def test_the_one_step_off_example_is_asynchronous_and_one_step_off():
    from hybridrl.config.async_checks import async_enabled, batches_per_sync

    path = os.path.join(os.path.dirname(__file__), "../../../examples/one_step_off/config.yaml")
    cfg = load_config(RLConfig, path)
    validate_rl_config(cfg)
    assert async_enabled(cfg) and batches_per_sync(cfg.async_training) == 2 and cfg.trainer.backend == "ray"


SWEEPS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../../examples/sweep/*.yaml")))


@pytest.mark.parametrize("path", SWEEPS, ids=os.path.basename)
def test_sweep_example_passes_the_sweeps_own_check(path, default_data_cwd):
    """What `hybridrl sweep FILE` checks before Ray starts, where data/arithmetic exists (the files say to run from
    the repository root after `make data`; the check looks for the base's data files)."""
    from hybridrl.sweep.check import check_sweep
    from hybridrl.sweep.spec import load_sweep

    os.symlink(os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../examples")),
               default_data_cwd / "examples")  # a base.config is given from the repository root
    warnings = []
    check_sweep(load_sweep(os.path.abspath(path)), log=warnings.append)
    assert warnings == []
