"""plan/inert_keys.py: which keys set away from their defaults change nothing under the rest of the config."""

import pytest

from hybridrl.plan.inert_keys import DROPPED, NOTE, RULES, UNUSED, inert_keys, leaves
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig

ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"


def found(*overrides: str) -> dict:
    """{key: InertKey} of a config made of `overrides`."""
    return {k.key: k for k in inert_keys(load_config(RLConfig, None, list(overrides)))}


def test_the_defaults_have_no_inert_key():
    assert found() == {}


def test_every_rule_names_a_key_of_the_schema():
    """A misspelt key in a rule would never fire: each is a leaf, or a section ending in '.' with leaves."""
    keys = leaves(RLConfig())
    for rule in RULES:
        for key in rule.keys:
            assert key in keys or (key.endswith(".") and any(k.startswith(key) for k in keys)), key


def test_a_kl_loss_coefficient_with_the_kl_loss_off_is_a_dropped_intent():
    k = found(f"{ACTOR}.kl_loss_coef=0.5")[f"{ACTOR}.kl_loss_coef"]
    assert k.level == DROPPED and f"{ACTOR}.use_kl_loss=false" in k.why and k.fix == f"{ACTOR}.use_kl_loss=true"
    assert found(f"{ACTOR}.kl_loss_coef=0.5", f"{ACTOR}.use_kl_loss=true") == {}
    assert found(f"{ACTOR}.kl_loss_coef=0.0") == {}  # 0 agrees with the term off (DAPO's scripts set it so)


def test_the_kl_in_reward_keys_with_the_penalty_off():
    got = found("algorithm.kl_ctrl.kl_coef=0.2", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_penalty=k3")
    assert got["algorithm.kl_ctrl.kl_coef"].level == DROPPED
    assert got["algorithm.kl_ctrl.type"].level == UNUSED and got["algorithm.kl_penalty"].level == UNUSED
    # on, a fixed controller still ignores the adaptive rule's keys
    got = found("algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.target_kl=0.5")
    assert "type=fixed" in got["algorithm.kl_ctrl.target_kl"].why


def test_a_tool_file_with_multi_turn_off_is_a_dropped_intent():
    k = found(f"{ROLLOUT}.multi_turn.tool_config_path=tools.yaml")[f"{ROLLOUT}.multi_turn.tool_config_path"]
    assert k.level == DROPPED and k.fix == f"{ROLLOUT}.multi_turn.enable=true"


def test_critic_keys_without_a_critic():
    assert found("critic.optim.lr=1e-4")["critic.optim.lr"].why == "algorithm.adv_estimator=grpo uses no critic"
    assert found("critic.optim.lr=1e-4", "algorithm.adv_estimator=gae") == {}


@pytest.mark.parametrize("estimator, key, value, inert", [
    ("grpo", "algorithm.lam", 0.95, True),
    ("grpo", "algorithm.gamma", 0.99, True),
    ("gae", "algorithm.lam", 0.95, False),
    ("reinforce_plus_plus", "algorithm.gamma", 0.99, False),
    ("reinforce_plus_plus", "algorithm.lam", 0.95, True),
    ("rloo", "algorithm.norm_adv_by_std_in_grpo", "false", True),
    ("grpo", "algorithm.norm_adv_by_std_in_grpo", "false", False),
    ("grpo_passk", "algorithm.norm_adv_by_std_in_grpo", "false", False),
])
def test_the_estimator_is_asked_whether_it_reads_its_parameters(estimator, key, value, inert):
    got = found(f"algorithm.adv_estimator={estimator}", f"{key}={value}")
    assert (key in got) is inert
    if inert:
        assert got[key].why == f"algorithm.adv_estimator={estimator} does not read it"


@pytest.mark.parametrize("loss, key, value, inert", [
    ("vanilla", "clip_ratio_c", 10.0, False),  # the dual clip
    ("gspo", "clip_ratio_c", 10.0, True),
    ("vanilla", "tau_pos", 2.0, True),
    ("sapo", "tau_pos", 2.0, False),
    ("gpg", "clip_ratio", 0.3, True),
    ("cispo", "clip_ratio_high", 0.28, False),
])
def test_the_policy_loss_is_asked_whether_it_reads_its_parameters(loss, key, value, inert):
    got = found(f"{ACTOR}.policy_loss.loss_mode={loss}", f"{ACTOR}.{key}={value}")
    assert (f"{ACTOR}.{key}" in got) is inert


def test_clip_ratio_replaced_by_both_of_its_sides():
    got = found(f"{ACTOR}.clip_ratio=0.3", f"{ACTOR}.clip_ratio_low=0.2", f"{ACTOR}.clip_ratio_high=0.28")
    assert "clip_ratio_low and clip_ratio_high are both set" in got[f"{ACTOR}.clip_ratio"].why
    assert set(got) == {f"{ACTOR}.clip_ratio"}


def test_a_token_budget_counts_only_where_a_pass_is_dynamic():
    key = f"{ACTOR}.ppo_max_token_len_per_gpu"
    assert key in found(f"{key}=4000")
    assert found(f"{key}=4000", f"{ACTOR}.use_dynamic_bsz=true") == {}
    # the policy's log-prob pass falls back to the actor's budget when only it is dynamic (plan/levers.py)
    assert found(f"{key}=4000", f"{ROLLOUT}.log_prob_use_dynamic_bsz=true") == {}


def test_reference_keys_without_a_reference():
    key = "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
    assert "no reference model" in found(f"{key}=4")[key].why
    assert found(f"{key}=4", f"{ACTOR}.use_kl_loss=true") == {}


def test_verl_no_ops_on_a_cpu_are_notes():
    got = found(f"{ACTOR}.fsdp_config.param_offload=true", f"{ROLLOUT}.gpu_memory_utilization=0.6")
    assert {k.level for k in got.values()} == {NOTE}


def test_validation_keys_when_nothing_is_validated():
    got = found(f"{ROLLOUT}.val_kwargs.n=4", "trainer.test_freq=-1", "trainer.val_before_train=false")
    assert "validation never runs" in got[f"{ROLLOUT}.val_kwargs.n"].why
    assert f"{ROLLOUT}.val_kwargs.n" not in found(f"{ROLLOUT}.val_kwargs.n=4")
    assert "greedy" in found(f"{ROLLOUT}.val_kwargs.top_p=0.5")[f"{ROLLOUT}.val_kwargs.top_p"].why


def test_disabled_features_and_greedy_sampling():
    got = found("algorithm.filter_groups.metric=score", "reward_model.overlong_buffer.penalty_factor=2",
                f"{ROLLOUT}.do_sample=false", f"{ROLLOUT}.top_p=0.9", f"{ACTOR}.loss_scale_factor=100",
                "data.filter_overlong_prompts=true", "data.truncation=left")
    assert set(got) == {"algorithm.filter_groups.metric", "reward_model.overlong_buffer.penalty_factor",
                        f"{ROLLOUT}.top_p", f"{ACTOR}.loss_scale_factor", "data.truncation"}
    assert all(k.level == UNUSED for k in got.values())


def test_an_unknown_estimator_is_left_to_the_config_errors():
    config = RLConfig()
    config.algorithm.adv_estimator, config.algorithm.lam = "nope", 0.9
    assert inert_keys(config) == []


def test_a_spelled_out_default_is_not_reported():
    """DAPO's clip_ratio_low=0.2 beside clip_ratio=0.2: the same lower bound, so not 'unused' either."""
    assert found(f"{ACTOR}.clip_ratio_low=0.2", f"{ACTOR}.clip_ratio_high=0.28") == {}


def test_a_budget_the_pass_overrides_with_its_own():
    """The policy's log-prob pass is dynamic with its own budget: the actor's budget still sizes the update."""
    got = found(f"{ACTOR}.use_dynamic_bsz=true", f"{ACTOR}.ppo_max_token_len_per_gpu=4000",
                f"{ROLLOUT}.log_prob_max_token_len_per_gpu=8000", f"{ROLLOUT}.log_prob_use_dynamic_bsz=false")
    assert set(got) == {f"{ROLLOUT}.log_prob_max_token_len_per_gpu"}  # its pass is fixed-size


def test_rollout_correction_thresholds_follow_their_modes():
    rc = "algorithm.rollout_correction"
    got = found(f"{rc}.rollout_is=null", f"{rc}.rollout_is_threshold=5", f"{rc}.rollout_rs_threshold=1.5")
    assert set(got) == {f"{rc}.rollout_is_threshold", f"{rc}.rollout_rs_threshold"}
    # rollout_rs without its own threshold takes rollout_is_threshold as its band's upper end (trainer/build.py)
    assert found(f"{rc}.rollout_is=null", f"{rc}.rollout_rs=token", f"{rc}.rollout_is_threshold=5") == {}


def test_the_reason_names_the_deciding_value():
    why = found(f"{ACTOR}.loss_scale_factor=100")[f"{ACTOR}.loss_scale_factor"].why
    assert why == f"{ACTOR}.loss_agg_mode=token-mean (only seq-mean-token-sum-norm reads it)"
