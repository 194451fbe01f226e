"""The `config` check: ✓ on a config train accepts; ✗ on a config with problems (each listed, naming its key) and
on a key whose intent the config silently drops; keys with no effect, train's warnings and verl's accepted
no-ops are details of a ✓."""

from hybridrl.check.config_keys import config
from hybridrl.check.context import CheckContext
from hybridrl.check.result import FAIL, PASS

ACTOR = "actor_rollout_ref.actor"


def run(tmp_path, *overrides: str):
    return config(CheckContext(None, list(overrides), str(tmp_path)))


def test_passes_on_the_default_config(tmp_path):
    r = run(tmp_path)
    assert r.status == PASS and r.summary.startswith("trains as given: 32 prompts x 8 = 256 responses per step")
    # nothing unused or warned about; only the keys left unset whose default is hybridrl's task's, not verl's
    assert r.details and all(d.startswith("not verl's default: ") for d in r.details), r.details
    assert ("not verl's default: actor_rollout_ref.actor.optim.lr is not set: hybridrl's default 0.0002 applies, "
            "verl's is 1e-06") in r.details


def test_fails_on_every_problem_at_once(tmp_path):
    """Seeded: a mini-batch that does not divide the batch, and a critic pool without a critic."""
    r = run(tmp_path, f"{ACTOR}.ppo_mini_batch_size=5", "critic.n_workers=2")
    assert r.status == FAIL and r.summary.startswith("2 problems")
    assert any("ppo_mini_batch_size=5 does not divide data.train_batch_size=32" in d for d in r.details)
    assert any(d.startswith("critic.n_workers=2") for d in r.details)
    assert not any(d.startswith("unused: critic.n_workers") for d in r.details)  # said once, as the error
    assert "names" in r.fix


def test_fails_on_a_kl_coefficient_with_the_kl_loss_off(tmp_path):
    """Seeded: kl_loss_coef=0.5 with use_kl_loss=false trains with no KL term at all."""
    r = run(tmp_path, f"{ACTOR}.kl_loss_coef=0.5")
    assert r.status == FAIL and r.summary == f"{ACTOR}.kl_loss_coef is set but has no effect"
    assert f"{ACTOR}.use_kl_loss=false" in r.details[0]
    assert f"set {ACTOR}.use_kl_loss=true" in r.fix
    assert run(tmp_path, f"{ACTOR}.kl_loss_coef=0.5", f"{ACTOR}.use_kl_loss=true").status == PASS


def test_unused_keys_warnings_and_no_ops_are_details_of_a_pass(tmp_path):
    r = run(tmp_path, "critic.optim.lr=1e-4", "algorithm.use_kl_in_reward=true", f"{ACTOR}.use_kl_loss=true",
            f"{ACTOR}.fsdp_config.param_offload=true")
    assert r.status == PASS
    assert "unused: critic.optim.lr=0.0001 has no effect: algorithm.adv_estimator=grpo uses no critic" in r.details
    assert any(d.startswith("warning: algorithm.use_kl_in_reward=true and") for d in r.details)  # counted twice
    assert any(d.startswith(f"note: {ACTOR}.fsdp_config.param_offload=true") for d in r.details)
    assert any(d.startswith(f"note: {ACTOR}.skip_zero_advantage") for d in r.details)  # plan's note, KL loss on


def test_the_verl_gsm8k_command_passes(tmp_path):
    """verl's GSM8K GRPO keys (examples/gsm8k_verl_command/run.sh, the model left bundled): no ✗ from its no-ops."""
    r = run(tmp_path, "data.max_prompt_length=512", "data.max_response_length=1024",
            "data.filter_overlong_prompts=True",
            "data.train_batch_size=16", f"{ACTOR}.ppo_mini_batch_size=4", f"{ACTOR}.ppo_micro_batch_size_per_gpu=4",
            f"{ACTOR}.use_kl_loss=True", f"{ACTOR}.kl_loss_coef=0.001", f"{ACTOR}.kl_loss_type=low_var_kl",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=5",
            "actor_rollout_ref.ref.fsdp_config.param_offload=True", "algorithm.use_kl_in_reward=False")
    assert r.status == PASS, r.details
    assert not any(d.startswith("unused:") for d in r.details)


def test_every_key_train_says_has_no_effect_is_listed_by_the_check(tmp_path):
    """Issue #37: a key that has no effect gets train's warning line and is listed by the check; the two are
    separate code paths (trainer/build.py logs config_warnings; the check judges the config as given)."""
    from hybridrl.config.validate import key_warnings
    from hybridrl.plan.resolve import config_warnings, load_rl_config

    overrides = ["critic.optim.lr=1e-4", "algorithm.gamma=0.9", f"{ACTOR}.fsdp_config.param_offload=true",
                 "algorithm.kl_ctrl.kl_coef=0.2", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"]
    cfg, _ = load_rl_config(None, overrides)  # validated and derived, as train gets it
    said = [w for w in config_warnings(cfg) if w not in key_warnings(cfg)]
    assert sorted(w.split("=")[0] for w in said) == sorted(o.split("=")[0] for o in overrides)  # each once
    r = run(tmp_path, *overrides)
    # a line train prints is the check's line plus, for a dropped intent, the switch (the check's fix says it)
    listed = [d.removeprefix("unused: ").removeprefix("note: ") for d in r.details]
    for w in said:
        assert any(w == d or w.startswith(d + "; set ") for d in listed), (w, r.details)
    assert r.status == FAIL and r.summary == "algorithm.kl_ctrl.kl_coef is set but has no effect"  # the dropped intent
