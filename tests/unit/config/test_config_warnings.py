"""`hybridrl train`'s start-up warnings (plan/resolve.py config_warnings): a key the user set away from its
default that this config never reads gets one line saying why; defaults and derived values get none."""

from __future__ import annotations

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import key_warnings
from hybridrl.plan.resolve import config_warnings, load_rl_config

ARR = "actor_rollout_ref"


def warnings(*overrides: str) -> list[str]:
    cfg, _ = load_rl_config(None, list(overrides))  # validated and derived, as train gets it
    return config_warnings(cfg)


def test_the_defaults_warn_of_nothing_though_validation_derived_sizes_into_them():
    # ref.log_prob_micro_batch_size_per_gpu is derived (256) with no reference: not the user's setting
    cfg, _ = load_rl_config(None, [])
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu is not None
    assert config_warnings(cfg) == []


def test_a_key_that_is_not_read_gets_one_line_saying_why():
    assert warnings("algorithm.kl_penalty=k3", "critic.optim.lr=1e-4") == [
        "critic.optim.lr=0.0001 has no effect: algorithm.adv_estimator=grpo uses no critic",
        "algorithm.kl_penalty=k3 has no effect: algorithm.use_kl_in_reward=false"]


def test_a_dropped_intent_says_which_switch_would_make_it_count():
    assert warnings("algorithm.kl_ctrl.kl_coef=0.2") == [
        "algorithm.kl_ctrl.kl_coef=0.2 has no effect: algorithm.use_kl_in_reward=false, so the reward has no KL "
        "penalty; set algorithm.use_kl_in_reward=true for it to count, or remove it"]


def test_a_key_set_to_its_default_or_read_is_not_reported():
    assert warnings("critic.optim.lr=1e-5") == []  # the critic's default lr
    assert warnings("algorithm.kl_penalty=k3", "algorithm.use_kl_in_reward=true") == []


def test_the_user_set_derived_size_of_a_pass_that_does_not_run_is_reported():
    (line,) = warnings(f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=16")
    assert line.startswith(f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=16 has no effect: there is no reference")


def test_the_check_lists_inert_keys_apart_from_the_warnings():
    cfg = load_config(RLConfig, None, ["algorithm.kl_penalty=k3"])
    assert key_warnings(cfg) == [] and len(config_warnings(cfg)) == 1
