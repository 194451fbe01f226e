"""vocab/verl_defaults.py: a key a command leaves unset whose hybridrl default differs from verl's is listed
with both values; a key the command sets (on the command line, with Hydra's + form, or in a YAML file), or whose
default agrees, is not."""

from __future__ import annotations

from hybridrl.config.loader import load_config, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.vocab.verl_defaults import VERL_DEFAULTS, given_keys, unset_keys_with_other_defaults


def test_every_key_of_the_table_is_a_schema_key_of_the_same_type():
    keys, defaults = valid_keys(RLConfig), RLConfig()
    for key, verl in VERL_DEFAULTS.items():
        assert key in keys, key
        ours = load_config(RLConfig, None, [f"{key}={verl}"])  # verl's value loads as the key's type
        assert [g.key for g in unset_keys_with_other_defaults(ours, [])].count(key) == 0, key


def test_unset_keys_are_listed_with_both_defaults_and_set_ones_are_not(tmp_path):
    yaml = tmp_path / "c.yaml"
    yaml.write_text("data:\n  train_batch_size: 16\n")
    items = ["actor_rollout_ref.rollout.n=5", "++algorithm.adv_estimator=grpo"]
    cfg = load_config(RLConfig, str(yaml), items)
    gaps = {g.key: g for g in unset_keys_with_other_defaults(cfg, given_keys(items, str(yaml)))}
    assert {"actor_rollout_ref.rollout.n", "algorithm.adv_estimator", "data.train_batch_size"}.isdisjoint(gaps)
    lr = gaps["actor_rollout_ref.actor.optim.lr"]
    assert lr.line() == ("actor_rollout_ref.actor.optim.lr is not set: hybridrl's default 0.0002 applies, verl's "
                         "is 1e-06")


def test_a_default_that_agrees_is_not_listed():
    cfg = load_config(RLConfig, None, ["trainer.test_freq=-1"])  # set, but to verl's value; and given
    assert "trainer.test_freq" not in {g.key for g in unset_keys_with_other_defaults(cfg, [])}
