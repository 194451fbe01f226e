"""Every registered estimator and policy loss trains for real: parameters move, metrics stay finite."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow


def train_two_steps(arith_data, tmp_path, extra: list[str]):
    cfg = load_config(RLConfig, None, [
        f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.n=4", "trainer.total_training_steps=2", "trainer.val_before_train=false",
        "actor_rollout_ref.actor.optim.weight_decay=0", "actor_rollout_ref.actor.optim.lr=1e-3",
        f"trainer.default_local_dir={tmp_path}", *extra])
    run = build_run(resolve(cfg), log=lambda *_: None)
    before = [p.detach().clone() for p in run.policy.module.parameters()]
    RLTrainer(run).fit()
    moved = sum(not torch.equal(a, b) for a, b in zip(before, run.policy.module.parameters()))
    records = [json.loads(line) for line in open(run.tracker.path)]
    return moved, len(before), records


def assert_finite(records):
    for record in records:
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in record.values()), record


SETTINGS = {
    "rloo": ["algorithm.adv_estimator=rloo"],
    "reinforce_plus_plus": ["algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=0.99"],
    "reinforce_plus_plus_baseline": ["algorithm.adv_estimator=reinforce_plus_plus_baseline"],
    "opo": ["algorithm.adv_estimator=opo"],
    "grpo_passk": ["algorithm.adv_estimator=grpo_passk"],
    "gpg": ["algorithm.adv_estimator=gpg", "actor_rollout_ref.actor.policy_loss.loss_mode=gpg"],
    "dr_grpo": ["algorithm.norm_adv_by_std_in_grpo=false", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"],
    "gspo": ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
             "actor_rollout_ref.actor.clip_ratio_low=3e-4", "actor_rollout_ref.actor.clip_ratio_high=4e-4",
             "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"],
    "cispo": ["actor_rollout_ref.actor.policy_loss.loss_mode=cispo", "actor_rollout_ref.actor.ppo_epochs=2"],
    "sapo": ["actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
             "actor_rollout_ref.actor.ppo_epochs=2"],
    "remax": ["algorithm.adv_estimator=remax"],
    "remax_single_sample": ["algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.n=1",
                            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"],
    "gae_ppo_critic": ["algorithm.adv_estimator=gae", "algorithm.lam=0.95", "critic.optim.lr=1e-3",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                       "actor_rollout_ref.actor.ppo_epochs=2"],
    "dapo": ["algorithm.filter_groups.enable=true", "data.gen_batch_size=12", "reward_model.overlong_buffer.enable=true",
             "reward_model.overlong_buffer.len=4", "actor_rollout_ref.actor.clip_ratio_low=0.2",
             "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "kl_in_reward_adaptive": ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                              "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_ctrl.target_kl=1e-6",
                              "algorithm.kl_ctrl.horizon=100"],
    "entropy_bonus": ["actor_rollout_ref.actor.entropy_coeff=0.01"],
    "dapo_clip_higher_kl_plus": ["actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.use_kl_loss=true",
                                 "actor_rollout_ref.actor.kl_loss_type=low_var_kl+"],
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_algorithm_trains(arith_data, tmp_path, name):
    moved, total, records = train_two_steps(arith_data, tmp_path, SETTINGS[name])
    assert moved == total, f"{total - moved} of {total} parameter tensors did not change"
    assert [r["step"] for r in records] == [1, 2]
    assert_finite(records)
    # a step can hold only zero-variance groups (8 prompts x 4 samples), but not both
    assert any(r["critic/advantages/max"] != r["critic/advantages/min"] for r in records)


CRITIC_KEYS = ["critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/vf_explained_var",
               "critic/values/mean", "critic/grad_norm"]


def test_ppo_critic_warmup_updates_only_the_critic_first(arith_data, tmp_path):
    moved, total, records = train_two_steps(arith_data, tmp_path, [
        "algorithm.adv_estimator=gae", "critic.optim.lr=1e-3", "trainer.critic_warmup=1"])
    assert_finite(records)
    assert all(k in r for r in records for k in CRITIC_KEYS)
    assert "actor/pg_loss" not in records[0] and "actor/pg_loss" in records[1]  # step 1 is critic-only
    assert moved == total
    # the critic learned: its loss on step 2's batch differs from step 1's, and its values moved
    assert records[0]["critic/vf_loss"] != records[1]["critic/vf_loss"]
    assert records[0]["critic/values/mean"] != records[1]["critic/values/mean"]


def test_adaptive_kl_coefficient_moves_and_the_penalty_enters_rewards(arith_data, tmp_path):
    _, _, records = train_two_steps(arith_data, tmp_path, SETTINGS["kl_in_reward_adaptive"])
    # step 1 samples from π = π_ref: KL is 0 up to float noise, below the 1e-6 target -> the coefficient
    # shrinks by (1 - 0.2 * 32 / 100) = 0.936 (error clipped at -0.2)
    assert records[0]["actor/reward_kl_penalty_coeff"] == pytest.approx(0.05)
    assert records[1]["actor/reward_kl_penalty_coeff"] == pytest.approx(0.05 * 0.936)
    assert abs(records[0]["actor/reward_kl_penalty"]) < 1e-5
    # after one update the policy has moved: a non-zero KL, so rewards differ from scores
    assert records[1]["actor/reward_kl_penalty"] != 0
    assert records[1]["critic/rewards/mean"] != records[1]["critic/score/mean"]


def test_dynamic_sampling_trains_on_informative_groups_only(arith_data, tmp_path):
    _, _, records = train_two_steps(arith_data, tmp_path, SETTINGS["dapo"])
    for r in records:
        assert r["train/num_gen_batches"] >= 1 and 0 < r["train/kept_group_ratio"] <= 1
        # every kept group has right and wrong answers: the batch always has both signs
        assert r["critic/advantages/min"] < 0 < r["critic/advantages/max"]


def test_entropy_bonus_raises_entropy(arith_data, tmp_path):
    entropy = {}
    for coeff in (0.0, 1.0):
        _, _, records = train_two_steps(arith_data, tmp_path / str(coeff), [
            f"actor_rollout_ref.actor.entropy_coeff={coeff}", "actor_rollout_ref.actor.optim.lr=3e-3"])
        entropy[coeff] = records[1]["actor/entropy"]  # same first step, then one update apart
    assert entropy[1.0] > entropy[0.0] + 0.05, entropy


@pytest.mark.parametrize("extra,has_reference,has_critic", [
    ([], False, False),
    (["actor_rollout_ref.actor.use_kl_loss=true"], True, False),
    (["algorithm.use_kl_in_reward=true"], True, False),
    (["algorithm.adv_estimator=gae"], False, True),
])
def test_reference_and_critic_exist_only_when_needed(arith_data, tmp_path, extra, has_reference, has_critic):
    cfg = load_config(RLConfig, None, [f"data.train_files={arith_data['train']}", "data.val_files=[]",
                                       f"trainer.default_local_dir={tmp_path}", *extra])
    run = build_run(resolve(cfg), log=lambda *_: None)
    assert (run.reference is not None, run.critic is not None) == (has_reference, has_critic)
    assert (run.kl_ctrl is not None) == ("algorithm.use_kl_in_reward=true" in extra)
