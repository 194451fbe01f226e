"""Every choice-typed key is validated whether or not the config reads it (config/choice_keys.py for registry names,
the schema's declared choices, the dtype spellings), and each string key is either choice-typed or free text."""

from __future__ import annotations

import typing

import pytest

from hybridrl.config.choice_keys import CHOICE_KEYS
from hybridrl.config.loader import field_type, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import load_rl_config_checked
from hybridrl.trainer.tracking import LOGGERS

ARR = "actor_rollout_ref"
FIELDS = valid_keys(RLConfig)
DECLARED = {k: f.metadata["choices"] for k, f in FIELDS.items() if "choices" in f.metadata}
REGISTRY = {c.key: tuple(c.registry.names()) for c in CHOICE_KEYS}
DTYPE = ("fp32", "bf16")  # plan/levers.py dtype_name, spelled fp32/float32, bf16/bfloat16
DTYPES = {k: DTYPE for k in FIELDS if k.endswith(("param_dtype", "reduce_dtype", "buffer_dtype", "model_dtype"))}
LISTS = {"trainer.logger": tuple(LOGGERS)}
CHOICES = {**DECLARED, **REGISTRY, **DTYPES, **LISTS}
# string keys whose value is free text: paths, names, column names, module names
FREE_TEXT = {"data.train_files", "data.val_files", "data.prompt_key", "data.reward_fn_key", f"{ARR}.model.path",
             f"{ARR}.model.target_modules", f"{ARR}.model.exclude_modules", f"{ARR}.model.lora_adapter_path",
             f"{ARR}.rollout.multi_turn.tool_config_path", f"{ARR}.rollout.agent.path", f"{ARR}.rollout.agent.name",
             "critic.model.path", "critic.model.target_modules",
             "critic.model.exclude_modules", "reward_model.model.path", "custom_reward_function.path",
             "custom_reward_function.name", "distillation.teacher_model.model_path", "trainer.project_name",
             "trainer.experiment_name", "trainer.rollout_data_dir", "trainer.validation_data_dir",
             "trainer.default_local_dir", "trainer.resume_from_path", "trainer.profile_timeline",
             "ray_kwargs.ray_init.address"}


def _stringy(key: str) -> bool:
    tp = field_type(RLConfig, key)
    return str in (tp, *typing.get_args(tp))


def test_every_string_key_is_choice_typed_or_free_text():
    """A new string key must be classified: a choice key added without a check fails here."""
    strings = {k for k in FIELDS if _stringy(k)}
    assert strings - set(CHOICES) == FREE_TEXT
    assert len(CHOICES) >= 30


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_a_bad_value_is_refused_whatever_the_switches(key):
    """With every other key at its default (KL terms off, no critic, no distillation), a bad value is still an
    error naming the key and every valid value."""
    value = ["nonsense"] if key in LISTS else "nonsense"
    _, errors, _ = load_rl_config_checked(None, [f"{key}={value}".replace("'", "")])
    mine = [e for e in errors if key in e]
    assert mine, errors
    assert all(choice in mine[0] for choice in CHOICES[key]), mine[0]


def test_a_number_for_an_estimator_says_where_a_coefficient_goes():
    _, errors, _ = load_rl_config_checked(None, ["algorithm.kl_penalty=0.01"])
    assert errors == ["algorithm.kl_penalty='0.01' is not a known KL estimator; valid values: abs, abs+, k1, k1+, k2, "
                      "k2+, k3, k3+, kl, kl+, low_var_kl, low_var_kl+, mse, mse+; it names the KL estimator, not a "
                      "coefficient: the KL coefficient is algorithm.kl_ctrl.kl_coef (in the reward, with "
                      f"algorithm.use_kl_in_reward=true) or {ARR}.actor.kl_loss_coef (in the loss, with "
                      f"{ARR}.actor.use_kl_loss=true)"]


def test_a_bad_estimator_does_not_hide_the_other_choice_keys():
    _, errors, _ = load_rl_config_checked(None, ["algorithm.adv_estimator=ppo", "critic.loss_agg_mode=mean"])
    assert [e.split("=")[0] for e in errors] == ["algorithm.adv_estimator", "critic.loss_agg_mode"]


def test_the_defaults_pass():
    _, errors, plan = load_rl_config_checked(None, [])
    assert errors == [] and plan is not None


def test_the_table_names_schema_keys():
    assert [c.key for c in CHOICE_KEYS if c.key not in FIELDS] == []
