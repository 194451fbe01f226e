"""The "did you mean" never crosses roles (vocab/suggest.py): a key typed under a role's name is answered with that
role's keys or shared ones only; a key naming no role, with every role's key that fits."""

from __future__ import annotations

import pytest

from hybridrl.config.loader import valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.vocab.suggest import ROLE_WORDS, SECTION_ROLES, _section, suggestions, typed_role

KEYS = list(valid_keys(RLConfig))
ARR = "actor_rollout_ref"


def roles(key: str) -> frozenset[str]:
    return SECTION_ROLES.get(_section(key), frozenset())


@pytest.mark.parametrize("typed,expected", [
    ("actor.model.path", [f"{ARR}.model.path"]),  # the policy's model, not the critic's or the reward model's
    ("ref.model.path", [f"{ARR}.model.path"]),  # the reference starts from the policy's model
    ("rm.model.path", ["reward_model.model.path"]),
    ("reward.model.path", ["reward_model.model.path"]),
    ("ref.lr", []),  # the frozen reference has no optimizer: the actor's lr is another model's
    ("ref.optim.lr", []),
    (f"{ARR}.ref.ppo_epochs", []),
    ("critc.lr", ["critic.optim.lr"]),  # a misspelt role is still that role
    ("value.lr", ["critic.optim.lr"]),
    ("actor.log_prob_micro_batch_size_per_gpu", [f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu"]),  # not ref's
    ("rollout.n", [f"{ARR}.rollout.n", f"{ARR}.rollout.val_kwargs.n"]),  # the async pool's section lacks n
])
def test_a_role_typed_gets_its_own_keys(typed, expected):
    assert suggestions(typed, KEYS) == expected


@pytest.mark.parametrize("typed,expected", [
    ("model.path", [f"{ARR}.model.path", "critic.model.path", "reward_model.model.path"]),  # nobody's: all of them
    ("path", [f"{ARR}.model.path", f"{ARR}.rollout.agent.path", "critic.model.path", "reward_model.model.path",
              "custom_reward_function.path"]),
    ("fsdp_config.param_offload", [f"{ARR}.actor.fsdp_config.param_offload", f"{ARR}.ref.fsdp_config.param_offload",
                                   "critic.model.fsdp_config.param_offload"]),
])
def test_a_key_naming_no_role_names_every_roles_key(typed, expected):
    assert suggestions(typed, KEYS) == expected


def test_typed_role():
    assert typed_role(f"{ARR}.ref.x") == "reference" and typed_role("critc.lr") == "critic"
    assert typed_role("model.path") is None and typed_role("lr") is None


# every leaf of the schema typed under every role's name: no suggestion names a key of another role
LEAVES = sorted({k.rsplit(".", 1)[1] for k in KEYS})


@pytest.mark.parametrize("word", sorted(ROLE_WORDS))
def test_no_suggestion_crosses_roles(word):
    role = ROLE_WORDS[word]
    crossing = {}
    for leaf in LEAVES:
        for typed in (f"{word}.{leaf}", f"{word}.model.{leaf}"):
            wrong = [k for k in suggestions(typed, KEYS) if roles(k) and role not in roles(k)]
            if wrong:
                crossing[typed] = wrong
    assert crossing == {}
