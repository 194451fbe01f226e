"""TRL's names (vocab/trl_keys.py) are answered with the key to use here, never a look-alike key."""

from __future__ import annotations

import fnmatch
import re

import pytest

from hybridrl.config.loader import load_config, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig
from hybridrl.vocab.trl_keys import TABLE, answer
from hybridrl.vocab.verl_keys import TABLE as VERL_TABLE
from hybridrl.errors import ConfigError

ARR = "actor_rollout_ref"
SCHEMA_KEYS = set(valid_keys(RLConfig))


def refusal(item: str, source=None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, source, [] if source else [item])
    return str(e.value)


def test_beta_is_the_kl_coefficient_not_adams_betas():
    assert refusal("beta=0.04") == (
        f"command line: beta=0.04: `beta` is TRL's KL coefficient (GRPOConfig), not a key here; set "
        f"{ARR}.actor.kl_loss_coef=0.04 with {ARR}.actor.use_kl_loss=true (the KL term in the loss, as TRL adds it), "
        "or algorithm.kl_ctrl.kl_coef=0.04 with algorithm.use_kl_in_reward=true (the KL subtracted from the reward)")


def test_beta_in_yaml_names_the_file(tmp_path):
    path = tmp_path / "trl.yaml"
    path.write_text("beta: 0.04\n")
    message = refusal("", str(path))
    assert message.startswith(f"--config {path}: beta=0.04: `beta` is TRL's KL coefficient")
    assert "betas" not in message


@pytest.mark.parametrize("item,instead", [
    ("learning_rate=1e-6", f"set {ARR}.actor.optim.lr=1e-06 (the critic's is critic.optim.lr)"),
    ("num_generations=16", f"set {ARR}.rollout.n=16"),
    ("max_completion_length=1024", "set data.max_response_length=1024"),
    ("response_length=256", "set data.max_response_length=256"),
    ("max_prompt_length=512", "set data.max_prompt_length=512 with data.truncation=left"),
    ("per_device_train_batch_size=4", f"set {ARR}.actor.ppo_micro_batch_size_per_gpu=4 (the same unit: responses "
                                      "per worker); data.train_batch_size and"),
    ("gradient_accumulation_steps=8", f"hybridrl derives it from {ARR}.actor.ppo_mini_batch_size and"),
    ("num_iterations=2", f"set {ARR}.actor.ppo_epochs=2"),
    ("num_ppo_epochs=4", f"set {ARR}.actor.ppo_epochs=4"),
    ("epsilon=0.2", f"set {ARR}.actor.clip_ratio=0.2 (both sides; {ARR}.actor.clip_ratio_low=0.2 for the lower"),
    ("epsilon_high=0.28", f"set {ARR}.actor.clip_ratio_high=0.28"),
    ("cliprange=0.2", f"set {ARR}.actor.clip_ratio=0.2"),
    ("cliprange_value=0.2", "set critic.cliprange_value=0.2"),
    ("kl_coef=0.05", "set algorithm.kl_ctrl.kl_coef=0.05 with algorithm.use_kl_in_reward=true"),
    ("temperature=0.7", f"set {ARR}.rollout.temperature=0.7"),
    ("top_p=0.9", f"set {ARR}.rollout.top_p=0.9"),
    ("top_k=50", f"set {ARR}.rollout.top_k=50"),
    ("max_grad_norm=1.0", f"set {ARR}.actor.grad_clip=1 (the critic's is critic.grad_clip)"),
    ("num_train_epochs=3", "set trainer.total_epochs=3"),
    ("seed=42", "set trainer.seed=42 (rollout sampling) and data.seed=42 (the prompt shuffle)"),
    ("weight_decay=0.1", f"set {ARR}.actor.optim.weight_decay=0.1"),
    ("warmup_steps=10", f"set {ARR}.actor.optim.lr_warmup_steps=10"),
    ("warmup_ratio=0.1", f"set {ARR}.actor.optim.lr_warmup_steps_ratio=0.1"),
])
def test_a_trl_name_is_answered_with_our_key(item, instead):
    name, _, value = item.partition("=")
    message = refusal(item)
    assert message.startswith(f"command line: {name}=") and f"`{name}` is TRL's " in message
    assert instead in message and "did you mean" not in message


@pytest.mark.parametrize("item,instead", [
    ("beta=0", f"leave {ARR}.actor.use_kl_loss=false (the default: no KL term, as TRL's beta=0)"),
    ("loss_type=grpo", f"set {ARR}.actor.loss_agg_mode=seq-mean-token-mean"),
    ("loss_type=bnpo", f"set {ARR}.actor.loss_agg_mode=token-mean"),
    ("loss_type=dapo", f"set {ARR}.actor.loss_agg_mode=token-mean"),
    ("loss_type=dr_grpo", f"set {ARR}.actor.loss_agg_mode=seq-mean-token-sum-norm"),
    ("loss_type=other", f"set {ARR}.actor.loss_agg_mode: grpo is seq-mean-token-mean, bnpo and dapo are token-mean"),
    ("scale_rewards=true", "set algorithm.norm_adv_by_std_in_grpo=true (the default"),
    ("scale_rewards=group", "set algorithm.norm_adv_by_std_in_grpo=true (the default"),
    ("scale_rewards=false", "set algorithm.norm_adv_by_std_in_grpo=false (Dr.GRPO"),
    ("scale_rewards=none", "set algorithm.norm_adv_by_std_in_grpo=false (Dr.GRPO"),
    ("scale_rewards=batch", "hybridrl has no batch-std scaling"),
    ("top_k=null", f"leave {ARR}.rollout.top_k=-1 (the default: no top-k cut, as TRL's null)"),
    ("top_k=0", f"leave {ARR}.rollout.top_k=-1 (the default: no top-k cut, as TRL's 0)"),
])
def test_a_value_with_its_own_answer(item, instead):
    assert instead in refusal(item)


def test_every_key_an_answer_names_is_a_key_here():
    texts = [t for e in TABLE.values() for t in (e.instead, *e.by_value.values())]
    named = {k for t in texts for k in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", t)}
    assert named and named <= SCHEMA_KEYS, named - SCHEMA_KEYS


def test_no_trl_name_is_a_key_here_or_a_verl_key():
    assert not set(TABLE) & SCHEMA_KEYS
    assert [n for n in TABLE for e in VERL_TABLE for p in e.patterns if fnmatch.fnmatchcase(n, p)] == []


def test_only_the_top_level_name_is_trls():
    assert answer("beta", 0.1) is not None and answer("critic.optim.beta", 0.1) is None


def test_an_sft_config_does_not_answer_with_rl_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'learning_rate'; ") as e:
        load_config(SFTConfig, None, ["learning_rate=1e-5"])
    assert ARR not in str(e.value)
