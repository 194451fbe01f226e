"""How a step obtains π_old (trainer/old_policy.py): every combination of its inputs against a table worked out
by hand from the rules:

- an async batch of older weights with use_rollout_log_probs ("rollout"): the rollout's log-probs, always;
- on-policy (behaviour None) with one mini-batch and one epoch, and no phase before the update that reads π_old
  (no in-reward KL, no rollout_rs band): the update's first forward is π_old, no pass;
- otherwise a recompute: after the advantages and only for the rows with a gradient when skip_zero_advantage is
  on and neither the in-reward KL nor the rollout_rs band needs every row's π_old first; else every row, before
  the advantages. A "prox" batch (compute_prox_log_prob) always recomputes, whatever the plan.
"""

from __future__ import annotations

import itertools

import pytest

from hybridrl.errors import HybridRLError
from hybridrl.trainer.old_policy import OldPolicy, old_policy

ANSWERS = {"first": OldPolicy.FIRST_FORWARD, "rollout": OldPolicy.ROLLOUT, "all": OldPolicy.RECOMPUTE_ALL,
           "signal": OldPolicy.RECOMPUTE_WITH_SIGNAL}

# behaviour  on_policy  kl_in_reward  rollout_rs  skip_zero_advantage  ->  answer
TABLE = """
    -        1 1 1 1  all
    -        1 1 1 0  all
    -        1 1 0 1  all
    -        1 1 0 0  all
    -        1 0 1 1  all
    -        1 0 1 0  all
    -        1 0 0 1  first
    -        1 0 0 0  first
    -        0 1 1 1  all
    -        0 1 1 0  all
    -        0 1 0 1  all
    -        0 1 0 0  all
    -        0 0 1 1  all
    -        0 0 1 0  all
    -        0 0 0 1  signal
    -        0 0 0 0  all
    rollout  1 1 1 1  rollout
    rollout  1 1 1 0  rollout
    rollout  1 1 0 1  rollout
    rollout  1 1 0 0  rollout
    rollout  1 0 1 1  rollout
    rollout  1 0 1 0  rollout
    rollout  1 0 0 1  rollout
    rollout  1 0 0 0  rollout
    rollout  0 1 1 1  rollout
    rollout  0 1 1 0  rollout
    rollout  0 1 0 1  rollout
    rollout  0 1 0 0  rollout
    rollout  0 0 1 1  rollout
    rollout  0 0 1 0  rollout
    rollout  0 0 0 1  rollout
    rollout  0 0 0 0  rollout
    prox     1 1 1 1  all
    prox     1 1 1 0  all
    prox     1 1 0 1  all
    prox     1 1 0 0  all
    prox     1 0 1 1  all
    prox     1 0 1 0  all
    prox     1 0 0 1  signal
    prox     1 0 0 0  all
    prox     0 1 1 1  all
    prox     0 1 1 0  all
    prox     0 1 0 1  all
    prox     0 1 0 0  all
    prox     0 0 1 1  all
    prox     0 0 1 0  all
    prox     0 0 0 1  signal
    prox     0 0 0 0  all
"""


def table() -> dict[tuple, OldPolicy]:
    rows = {}
    for line in TABLE.strip().splitlines():
        behaviour, *flags, answer = line.split()
        rows[(None if behaviour == "-" else behaviour, *(f == "1" for f in flags))] = ANSWERS[answer]
    return rows


def test_every_combination_of_the_inputs_is_in_the_table_once():
    combos = list(itertools.product([None, "rollout", "prox"], [True, False], [True, False], [True, False],
                                    [True, False]))
    assert sorted(table(), key=str) == sorted(combos, key=str)
    assert len(TABLE.strip().splitlines()) == len(combos) == 48


@pytest.mark.parametrize("inputs", list(table()), ids=str)
def test_old_policy_follows_the_table(inputs):
    assert old_policy(*inputs) is table()[inputs]


@pytest.mark.parametrize("inputs", list(table()), ids=str)
def test_it_is_what_train_step_computed_inline_before(inputs):
    """The expressions trainer/rl.py's train_step evaluated each step before this function existed."""
    behaviour, on_policy, kl, rs, skip = inputs
    needs_old = behaviour != "rollout" and (not on_policy or kl or rs or behaviour == "prox")
    later = needs_old and skip and not kl and not rs
    legacy = (OldPolicy.ROLLOUT if behaviour == "rollout" else OldPolicy.RECOMPUTE_WITH_SIGNAL if later
              else OldPolicy.RECOMPUTE_ALL if needs_old else OldPolicy.FIRST_FORWARD)
    assert old_policy(*inputs) is legacy


def test_an_unknown_behaviour_is_an_error_naming_the_valid_ones():
    with pytest.raises(HybridRLError, match=r"behaviour='stale'.*\[None, 'rollout', 'prox'\]"):
        old_policy("stale", True, False, False, False)
