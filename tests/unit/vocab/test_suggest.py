"""The "did you mean" of unknown keys (vocab/suggest.py): only keys that plausibly mean the same thing."""

from __future__ import annotations

import re

import pytest

from hybridrl.config.loader import load_config, load_config_checked, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.vocab.suggest import same_quantity, suggestions
from hybridrl.vocab.tutorial_keys import answer as tutorial_answer
from hybridrl.errors import ConfigError

KEYS = list(valid_keys(RLConfig))
NONE = "no similar key exists (--help lists every key)"

# a bound (or a qualifier) the schema does not have: the unqualified key is another quantity
BOUNDS = ["algorithm.kl_ctrl.kl_coef_max", "algorithm.kl_ctrl.kl_coef_min", "algorithm.kl_ctrl.kl_coef_high",
          "kl_controller.kl_coef_max", "algorithm.kl_controller.kl_coef_max", "kl_coef_max", "max_kl_coef",
          "actor_rollout_ref.actor.clip_ratio_max", "actor_rollout_ref.actor.clip_ratio_min", "clip_ratio_max",
          "actor_rollout_ref.actor.clip_ratio_upper", "actor_rollout_ref.actor.optim.lr_max", "critic.optim.lr_max",
          "actor_rollout_ref.actor.kl_loss_coef_max", "actor_rollout_ref.actor.grad_clip_max"]


@pytest.mark.parametrize("typed", BOUNDS)
def test_a_bound_is_not_answered_with_the_quantity_it_bounds(typed):
    assert suggestions(typed, KEYS) == []
    # the KL coefficient's bounds are a tutorial's words, answered by vocab/tutorial_keys.py: no cap in verl
    expected = tutorial_answer(typed, 0.1) or f"unknown key {typed!r}; {NONE}"
    with pytest.raises(ConfigError, match=f"^command line: {re.escape(expected)}$"):
        load_config(RLConfig, None, [f"{typed}=0.1"])


@pytest.mark.parametrize("text", ["algorithm:\n  kl_ctrl:\n    kl_coef_max: 0.1\n",
                                  "kl_controller:\n  kl_coef_max: 0.1\n",
                                  "algorithm:\n  kl_controller:\n    kl_coef_max: 0.1\n"])
def test_a_bound_in_yaml_is_answered_with_no_cap(tmp_path, text):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, str(path))
    assert str(e.value).startswith(f"--config {path}: ") and "kl_ctrl.kl_coef=" not in str(e.value)
    assert str(e.value).endswith("there is no equivalent: verl's adaptive controller has no cap (each update "
                                 "multiplies the coefficient by at most 1 +- 0.2 * responses / "
                                 "algorithm.kl_ctrl.horizon); remove the key, and raise algorithm.kl_ctrl.horizon to "
                                 "let it move more slowly")


def test_the_suggested_key_of_a_bound_is_not_withheld_from_the_cross_key_checks():
    loaded = load_config_checked(RLConfig, None, ["algorithm.kl_ctrl.kl_coef_max=1"])
    assert loaded.refused == {"algorithm.kl_ctrl.kl_coef_max"}  # not algorithm.kl_ctrl.kl_coef: nobody meant it


@pytest.mark.parametrize("typed,expected", [
    ("actor_rollout_ref.actor.clip_ratio_hihg", ["actor_rollout_ref.actor.clip_ratio_high"]),  # a typo in the bound
    ("actor_rollout_ref.actor.clip_ratio_lo", ["actor_rollout_ref.actor.clip_ratio_low"]),  # a bound shortened
    ("algorithm.kl_controller.kl_coef", ["algorithm.kl_ctrl.kl_coef"]),  # the group misspelt, the leaf right
    ("data.max_prompt_len", ["data.max_prompt_length"]),
    ("trainer.total_epoch", ["trainer.total_epochs"]),
])
def test_a_typo_is_still_answered(typed, expected):
    assert suggestions(typed, KEYS) == expected


@pytest.mark.parametrize("typed", ["data.max_completion_length", "data.prompt_length"])
def test_a_leaf_with_another_word_or_without_the_bound_is_not_answered(typed):
    assert suggestions(typed, KEYS) == []  # max_prompt_length: a prompt, not a completion; a limit, not a length


@pytest.mark.parametrize("typed,expected", [
    ("lr", ["actor_rollout_ref.actor.optim.lr", "critic.optim.lr"]),  # not the critic's alone
    ("n", ["actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.val_kwargs.n"]),  # not validation's alone
    ("optim.lr", ["actor_rollout_ref.actor.optim.lr", "critic.optim.lr"]),
    ("actor.lr", ["actor_rollout_ref.actor.optim.lr"]),  # the typed group tells them apart
])
def test_a_leaf_several_sections_hold_names_each_of_them(typed, expected):
    assert suggestions(typed, KEYS) == expected


@pytest.mark.parametrize("typed,key,same", [
    ("kl_coef_max", "kl_coef", False),  # a bound typed, the key is the quantity
    ("kl_coef", "kl_coef_max", False),  # the key is a bound of what was typed
    ("clip_ratio_max", "clip_ratio_c", False),
    ("max_completion_length", "max_prompt_length", False),  # a word typed that the key lacks
    ("clip_ratio_hihg", "clip_ratio_high", True),
    ("ppo_epochss", "ppo_epochs", True),
    ("staleness", "staleness_threshold", True),  # a key adding a word that is not a bound
])
def test_same_quantity(typed, key, same):
    assert same_quantity(typed, key) is same
