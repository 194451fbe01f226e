"""Tutorials' words (vocab/tutorial_keys.py) are answered with the key that does what they mean, in one line."""

from __future__ import annotations

import re

import pytest

from hybridrl.algos.kl import KL_ESTIMATORS
from hybridrl.config.loader import load_config, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig
from hybridrl.vocab.trl_keys import TABLE as TRL_TABLE
from hybridrl.vocab.tutorial_keys import _ESTIMATORS, TABLE, answer
from hybridrl.vocab.verl_keys import entry_for
from hybridrl.errors import ConfigError

ARR = "actor_rollout_ref"
SCHEMA_KEYS = set(valid_keys(RLConfig))


def refusal(*items: str, source=None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, source, list(items))
    return str(e.value)


# --- the words of the issue, answered exactly -------------------------------------------------------------------


@pytest.mark.parametrize("item,expected", [
    ("actor_lr=1e-6", "actor_lr=1e-06: verl has no `actor_lr` (the actor's learning rate); to do what it means, set "
                      f"{ARR}.actor.optim.lr=1e-06"),
    ("critic_lr=1e-5", "critic_lr=1e-05: verl has no `critic_lr` (the critic's learning rate); to do what it means, "
                       "set critic.optim.lr=1e-05 (read with algorithm.adv_estimator=gae, the estimator with a critic)"),
    ("model.path=Qwen/Qwen2.5-0.5B", "model.path=Qwen/Qwen2.5-0.5B: verl has no `model.path` (the policy's model, which "
                                     "the rollout and the reference start from); to do what it means, set "
                                     f"{ARR}.model.path=Qwen/Qwen2.5-0.5B (the critic's model is critic.model.path, a "
                                     "reward model's reward_model.model.path)"),
    ("clip_range=0.2", "clip_range=0.2: verl has no `clip_range` (the PPO clip range epsilon of the policy ratio); to "
                       f"do what it means, set {ARR}.actor.clip_ratio=0.2 (both sides; {ARR}.actor.clip_ratio_low and "
                       "clip_ratio_high set one side)"),
    ("rollout_batch_size=64", "rollout_batch_size=64: verl has no `rollout_batch_size` (prompts per training step); to "
                              "do what it means, set data.train_batch_size=64 (prompts, each sampled "
                              f"{ARR}.rollout.n times: a count of responses is divided by {ARR}.rollout.n)"),
    ("kl_penalty=0.01", "kl_penalty=0.01: verl has no `kl_penalty` (a tutorial's \"KL penalty\": its coefficient, or by "
                        "a name its estimator); to do what it means, set algorithm.kl_ctrl.kl_coef=0.01 with "
                        "algorithm.use_kl_in_reward=true (the KL subtracted from the reward), or "
                        f"{ARR}.actor.kl_loss_coef=0.01 with {ARR}.actor.use_kl_loss=true (the KL term in the loss, "
                        "GRPO's)"),
])
def test_the_issues_words(item, expected):
    assert refusal(item) == f"command line: {expected}"


@pytest.mark.parametrize("item,instead", [
    ("model.dtype=bf16", f"set {ARR}.actor.fsdp_config.mixed_precision.param_dtype=bf16 (fp32 or bf16"),
    ("torch_dtype=bfloat16", f"set {ARR}.actor.fsdp_config.mixed_precision.param_dtype=bfloat16"),
    ("dtype=float16", "hybridrl trains in fp32 or bf16 (fp16 needs loss scaling)"),
    ("train_batch_size=256", "set data.train_batch_size=256 (prompts, each sampled"),
    ("actor_device_mesh=[2,4]", f"there is no device-mesh key: every role trains data-parallel over its workers "
                                f"(trainer.n_gpus_per_node * trainer.nnodes), with no tensor or sequence parallelism in "
                                f"training; set {ARR}.actor.strategy=fsdp2"),
    ("critic_device_mesh=[8]", "trainer.nnodes, or critic.n_gpus_per_node x critic.nnodes of its own with "
                               "critic.enable_resource_pool=true), with no tensor or sequence parallelism in training; "
                               "set critic.strategy=fsdp2"),
    ("ppo_micro_batch_size=16", f"set {ARR}.actor.ppo_micro_batch_size_per_gpu to 16 / (trainer.n_gpus_per_node * "
                                "trainer.nnodes)"),
    ("kl_penalty=low_var_kl", "set algorithm.kl_penalty=low_var_kl (the estimator of the KL in the reward"),
    ("kl_target=6", "set algorithm.kl_ctrl.target_kl=6 with algorithm.kl_ctrl.type=adaptive and "
                    "algorithm.use_kl_in_reward=true"),
    ("use_vllm=false", f"set {ARR}.rollout.name=hf"),
    ("vf_coef=0.1", "there is no equivalent: verl's critic is a model of its own"),
    ("ref.model.path=x", f"there is no equivalent: as in verl, the reference is the starting policy ({ARR}.model.path)"),
    ("kl_coef=0.05", f"for a KL term in the loss (GRPO's), set {ARR}.actor.kl_loss_coef=0.05"),  # TRL's table
])
def test_a_word_is_answered_with_what_it_means(item, instead):
    word = item.partition("=")[0]
    message = refusal(item)
    assert message.startswith(f"command line: {word}=") and instead in message and "did you mean" not in message


def test_a_kl_controller_block_in_yaml_gets_one_line_per_key(tmp_path):
    path = tmp_path / "tutorial.yaml"
    path.write_text("kl_controller:\n  type: adaptive\n  target_kl: 0.05\n  kl_coef: 0.5\n  kl_coef_max: 1.0\n")
    head, *body = refusal(source=str(path)).splitlines()
    assert head == "4 problems in the config:" and all(x.lstrip(" 1234.").startswith(f"--config {path}: ") for x in body)
    assert any("set algorithm.kl_ctrl.type=adaptive with algorithm.use_kl_in_reward=true" in x for x in body)
    assert any("set algorithm.kl_ctrl.target_kl=0.05 with algorithm.kl_ctrl.type=adaptive" in x for x in body)
    assert any("set algorithm.kl_ctrl.kl_coef=0.5 with algorithm.use_kl_in_reward=true" in x for x in body)
    assert any("kl_controller.kl_coef_max=1: verl has no `kl_controller.kl_coef_max` (a cap on the adaptive KL "
               "coefficient); there is no equivalent: verl's adaptive controller has no cap" in x for x in body)


# --- the table -------------------------------------------------------------------------------------------------


def test_every_key_an_answer_names_is_a_key_here():
    texts = [t for w in TABLE.values() for t in (w.instead, *w.by_value.values())]
    named = {k for t in texts for k in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", t)} - {"file.py"}  # <file.py>
    assert len(named) > 30 and named <= SCHEMA_KEYS, named - SCHEMA_KEYS


def test_no_word_is_a_key_here_a_verl_key_or_a_trl_name():
    assert not set(TABLE) & SCHEMA_KEYS
    assert [w for w in TABLE if entry_for(w) is not None] == []  # the verl table answers first: it would shadow
    assert not set(TABLE) & set(TRL_TABLE)


def test_the_estimator_names_answered_are_registered():
    assert set(_ESTIMATORS) <= set(KL_ESTIMATORS.names())


@pytest.mark.parametrize("word", sorted(TABLE))
def test_every_word_is_answered_in_one_line_naming_it(word):
    text = answer(word, 1)
    assert text is not None and "\n" not in text and text.startswith(f"{word}=1: verl has no `{word}` (")
    assert "{" not in text  # every placeholder filled


def test_an_sft_config_does_not_answer_with_rl_keys():
    with pytest.raises(ConfigError, match=r"unknown key 'actor_lr'; "):
        load_config(SFTConfig, None, ["actor_lr=1e-5"])
