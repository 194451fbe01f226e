"""Declared constraints (doc(..., ge=, gt=, choices= ...)) checked for every key, and every problem of a
command reported at once (config/constraints.py, loader.load_config_checked, validate.load_rl_config)."""

from __future__ import annotations

import re
import typing

import pytest

from hybridrl.config.constraints import range_text
from hybridrl.config.loader import field_type, load_config, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.config.sft import SFTConfig
from hybridrl.plan.resolve import load_rl_config
from hybridrl.errors import ConfigError, ConfigErrors

A = "actor_rollout_ref.actor."

# keys whose values are free text, paths, registry names (checked against their registry in validate.py,
# whose error lists the names) or dtype spellings (plan/levers.py accepts verl's many spellings)
FREE_STRINGS = {
    "data.prompt_key", "data.reward_fn_key", "actor_rollout_ref.model.path", "actor_rollout_ref.model.lora_adapter_path",
    "actor_rollout_ref.actor.policy_loss.loss_mode", "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.kl_loss_type", "actor_rollout_ref.rollout.multi_turn.tool_config_path",
    "actor_rollout_ref.rollout.agent.path", "actor_rollout_ref.rollout.agent.name",
    "critic.model.path", "critic.loss_agg_mode", "algorithm.adv_estimator", "algorithm.kl_penalty",
    "algorithm.rollout_correction.rollout_is", "algorithm.rollout_correction.rollout_rs", "reward_model.model.path",
    "custom_reward_function.path",
    "custom_reward_function.name", "trainer.project_name", "trainer.experiment_name", "trainer.rollout_data_dir",
    "trainer.validation_data_dir", "trainer.default_local_dir", "trainer.resume_from_path", "ray_kwargs.ray_init.address",
    "trainer.profile_timeline",  # a file path, checked writable by trainer/build.py
    "data.response_key", "model.partial_pretrain", "data.train_files", "data.val_files",
    "actor_rollout_ref.model.target_modules", "actor_rollout_ref.model.exclude_modules", "critic.model.target_modules",
    "critic.model.exclude_modules",
    "distillation.teacher_model.model_path",
    "distillation.distillation_loss.loss_mode",  # a KL_ESTIMATORS name (config/validate.py check_distillation)
    "trainer.logger",  # tracking.check_loggers: the names and, for each, that its package is installed
}


def _base(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, list) and args:
        return _base(args[0])
    return tp


@pytest.mark.parametrize("cls", [RLConfig, SFTConfig])
def test_every_numeric_and_choice_key_declares_its_valid_values(cls):
    """Adding a number key without a range, or a fixed-choice string without its choices, fails here."""
    missing = []
    for key, f in valid_keys(cls).items():
        base = _base(field_type(cls, key))
        meta = f.metadata
        if base in (int, float) and not any(k in meta for k in ("ge", "gt", "le", "lt")):
            missing.append(key)
        if base is str and "choices" not in meta and key not in FREE_STRINGS and not key.endswith("dtype"):
            missing.append(key)
    assert missing == []


@pytest.mark.parametrize("meta, text", [
    ({"ge": 1}, "at least 1"), ({"ge": 0}, ">= 0"), ({"gt": 0}, "> 0"), ({"gt": 0, "le": 1}, "in (0, 1]"),
    ({"ge": 0, "lt": 1}, "in [0, 1)"), ({"ge": 1, "also": (-1,)}, "-1 or at least 1"), ({"ge": -1}, ">= -1"),
])
def test_range_text(meta, text):
    assert range_text(meta) == text


@pytest.mark.parametrize("override, message", [
    # the three: each used to be accepted (grad_clip=-1 flips the gradient's sign in torch's
    # clip_grad_norm_, so training ran backwards) or a raw traceback (lr < 0 from torch's AdamW)
    (f"{A}grad_clip=-1", f"{A}grad_clip=-1.0 must be > 0 (a norm: <= 0 would flip or zero the gradient)"),
    (f"{A}clip_ratio_low=-0.2", f"{A}clip_ratio_low=-0.2 must be > 0 (or null)"),
    (f"{A}optim.lr=-0.1", f"{A}optim.lr=-0.1 must be > 0"),
    # their siblings
    ("critic.grad_clip=0", "critic.grad_clip=0.0 must be > 0 (a norm: <= 0 would flip or zero the gradient)"),
    ("critic.optim.lr=0", "critic.optim.lr=0.0 must be > 0"),
    (f"{A}optim.weight_decay=-0.01", f"{A}optim.weight_decay=-0.01 must be >= 0"),
    (f"{A}optim.betas=[0.9,1.0]", f"{A}optim.betas=[0.9, 1.0]: every value must be in [0, 1) (AdamW's beta1, beta2; "
                                  "e.g. [0.9, 0.999])"),
    (f"{A}optim.betas=[0.9]", f"{A}optim.betas=[0.9] must hold 2 values (AdamW's beta1, beta2; e.g. [0.9, 0.999])"),
    (f"{A}optim.lr_warmup_steps=-5", f"{A}optim.lr_warmup_steps=-5 must be -1 or >= 0 (-1: lr_warmup_steps_ratio decides)"),
    (f"{A}optim.min_lr_ratio=1.5", f"{A}optim.min_lr_ratio=1.5 must be in [0, 1]"),
    (f"{A}clip_ratio_high=0", f"{A}clip_ratio_high=0.0 must be > 0 (or null)"),
    (f"{A}entropy_coeff=-0.01", f"{A}entropy_coeff=-0.01 must be >= 0 (a bonus: the loss subtracts entropy_coeff * "
                                "entropy)"),
    (f"{A}kl_loss_coef=-1", f"{A}kl_loss_coef=-1.0 must be >= 0"),
    ("actor_rollout_ref.rollout.top_k=0", "actor_rollout_ref.rollout.top_k=0 must be -1 or at least 1 (-1: off)"),
    ("actor_rollout_ref.rollout.val_kwargs.top_p=0", "actor_rollout_ref.rollout.val_kwargs.top_p=0.0 must be in (0, 1]"),
    ("actor_rollout_ref.rollout.temperature=-1", "actor_rollout_ref.rollout.temperature=-1.0 must be >= 0"),
    ("algorithm.gamma=0", "algorithm.gamma=0.0 must be in (0, 1]"),
    ("algorithm.kl_ctrl.kl_coef=-0.1", "algorithm.kl_ctrl.kl_coef=-0.1 must be >= 0"),
    ("reward_model.rm_weight=-1", "reward_model.rm_weight=-1.0 must be >= 0"),
    ("trainer.test_freq=-2", "trainer.test_freq=-2 must be >= -1 (N > 0: every N steps and the last; -1 or 0: never)"),
    ("data.train_max_samples=0", "data.train_max_samples=0 must be -1 or at least 1 (-1: all)"),
    ("data.seed=-1", "data.seed=-1 must be in [0, 4294967295]"),
    ("trainer.use_legacy_worker_impl=maybe", "trainer.use_legacy_worker_impl='maybe' is not supported; valid values: "
                                             "auto, enable, disable (all train the same here)"),
    # not finite: an inf or nan learning rate (or clip) would corrupt training silently
    (f"{A}optim.lr=inf", f"{A}optim.lr=inf must be a finite number > 0"),
    (f"{A}grad_clip=nan", f"{A}grad_clip=nan must be a finite number > 0 (a norm: <= 0 would flip or zero the "
                          "gradient)"),
])
def test_values_out_of_their_declared_range_are_refused(override, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        load_config(RLConfig, None, [override])


@pytest.mark.parametrize("override", ["actor_rollout_ref.rollout.top_k=-1", "actor_rollout_ref.rollout.top_k=5",
                                      "data.train_max_samples=-1", "trainer.test_freq=0", "trainer.save_freq=0",
                                      f"{A}optim.lr_warmup_steps=-1", f"{A}clip_ratio_low=0.2", "algorithm.lam=0"])
def test_values_at_the_edges_of_their_range_pass(override):
    load_config(RLConfig, None, [override])


@pytest.mark.parametrize("override, message", [
    ("optim.lr=-1", "optim.lr=-1.0 must be > 0"),
    ("optim.clip_grad=0", "optim.clip_grad=0.0 must be > 0 (a norm: <= 0 would flip or zero the gradient)"),
    ("optim.lr_scheduler=linear", "optim.lr_scheduler='linear' is not supported; valid values: constant, cosine"),
    ("data.micro_batch_size_per_gpu=0", "data.micro_batch_size_per_gpu=0 must be at least 1 (or null)"),
])
def test_sft_keys_have_ranges_too(override, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        load_config(SFTConfig, None, [override])


def test_every_problem_of_a_command_in_one_report():
    """Unknown key, wrong type, broken interpolation, out-of-range values and a cross-key rule: one run."""
    with pytest.raises(ConfigErrors) as info:
        load_rl_config(None, ["data.train_batch_sise=8", "data.max_response_length=abc",
                              "trainer.default_local_dir=${nope}", f"{A}grad_clip=-1", f"{A}optim.lr=-0.1",
                              "actor_rollout_ref.rollout.n=1", "trainer.n_gpus_per_node=2", "trainer.backend=local"])
    assert info.value.messages == [
        "command line: unknown key 'data.train_batch_sise'; did you mean 'data.train_batch_size'? "
        "(--help lists every key)",
        "command line: data.max_response_length='abc' is not valid: expected an integer",
        "trainer.default_local_dir='${nope}': ${nope} refers to no config key; write ${section.key} with a key "
        "`--help` lists (e.g. ${trainer.experiment_name})",
        f"{A}grad_clip=-1.0 must be > 0 (a norm: <= 0 would flip or zero the gradient)",
        f"{A}optim.lr=-0.1 must be > 0",
        "algorithm.adv_estimator=grpo compares the responses to one prompt, so it needs actor_rollout_ref.rollout.n >= 2 "
        "(got 1); set actor_rollout_ref.rollout.n=8, for example",
        "trainer.n_gpus_per_node * trainer.nnodes = 2 with trainer.backend=local, which trains in this one process; set "
        "trainer.backend=ray for several workers, or trainer.n_gpus_per_node=1 trainer.nnodes=1",
    ]
    text = str(info.value)  # what the CLI prints after "error: ": a count, then one numbered line each
    assert text.splitlines()[0] == "7 problems in the config:"
    assert text.splitlines()[1].startswith("  1. command line: unknown key")


def test_cross_key_problems_of_a_refused_key_are_left_out():
    """data.train_batch_size=abc is refused and checked as its default 32, so 'ppo_mini_batch_size=64 is
    larger than data.train_batch_size=32' would be an artefact: only the type error is reported."""
    with pytest.raises(ConfigError) as info:
        load_rl_config(None, ["data.train_batch_size=abc", f"{A}ppo_mini_batch_size=64"])
    assert str(info.value) == "command line: data.train_batch_size='abc' is not valid: expected an integer"


def test_cross_key_checks_all_run():
    """Independent cross-key rules are all reported, not the first alone (validate_rl_config)."""
    with pytest.raises(ConfigErrors) as info:
        load_rl_config(None, ["reward_model.enable=true", "trainer.resume_from_path=x/global_step_1",
                              "data.gen_batch_size=64", "actor_rollout_ref.rollout.val_kwargs.do_sample=true"])
    assert [m.split(" ")[0] for m in info.value.messages] == [
        "reward_model.enable=true", "trainer.resume_from_path", "actor_rollout_ref.rollout.val_kwargs.temperature=0.0",
        "data.gen_batch_size"]


def test_several_type_errors_in_one_layer_are_all_reported():
    with pytest.raises(ConfigErrors) as info:
        load_config(RLConfig, None, ["data.train_batch_size=abc", "actor_rollout_ref.actor.use_kl_loss=maybe",
                                     "data.seed=1"])
    assert info.value.messages == [
        "command line: data.train_batch_size='abc' is not valid: expected an integer",
        "command line: actor_rollout_ref.actor.use_kl_loss='maybe' is not valid: expected true or false"]


@pytest.mark.parametrize("value, message", [
    ("${nope}", "trainer.default_local_dir='${nope}': ${nope} refers to no config key"),
    ("${oc.env:HYBRIDRL_TEST_NO_SUCH_VAR}", "trainer.default_local_dir='${oc.env:HYBRIDRL_TEST_NO_SUCH_VAR}': cannot "
                                            "resolve the interpolation (KeyError raised while resolving interpolation: "
                                            "\"Environment variable 'HYBRIDRL_TEST_NO_SUCH_VAR' not found\")"),
    ("${a.b", "cannot parse overrides: 'trainer.default_local_dir=${a.b' (no viable alternative at input '${a.b')"),
])
def test_broken_interpolation_is_one_line_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        load_config(RLConfig, None, [f"trainer.default_local_dir={value}"])


def test_interpolation_of_the_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match=re.escape(
            "data.train_batch_size='${trainer.project_name}': cannot resolve the interpolation (While dereferencing "
            "interpolation '${trainer.project_name}': Value 'hybridrl' of type 'str' could not be converted to "
            "Integer)")):
        load_config(RLConfig, None, ["data.train_batch_size=${trainer.project_name}"])


def test_a_good_interpolation_still_resolves():
    cfg = load_config(RLConfig, None, ["data.gen_batch_size=${data.train_batch_size}",
                                       "algorithm.filter_groups.enable=true"])
    assert cfg.data.gen_batch_size == 32


def test_missing_marker_is_not_silently_ignored():
    with pytest.raises(ConfigError, match=re.escape("command line: trainer.project_name=??? leaves the key without a "
                                                    "value; give one (or remove it)")):
        load_config(RLConfig, None, ["trainer.project_name=???"])


def test_several_malformed_overrides_are_all_reported():
    with pytest.raises(ConfigErrors) as info:
        load_config(RLConfig, None, ["data.train_files=[a, b", "oops", "data.train_batch_size=0"])
    assert [m.split(" ")[0] for m in info.value.messages] == ["cannot", "override", "data.train_batch_size=0"]


def test_one_problem_reads_as_before():
    e = ConfigErrors(["data.train_batch_size=0 must be at least 1"])
    assert str(e) == "data.train_batch_size=0 must be at least 1"
    assert isinstance(e, ConfigError)


def test_yaml_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("trainer:\n  project_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=re.escape(f"--config {path}: not UTF-8 text (byte 0xe9 at offset 28); save "
                                                    "the file as UTF-8")):
        load_config(RLConfig, str(path))


def test_a_folder_given_as_config_says_so(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"--config {tmp_path}: a folder, not a file")):
        load_config(RLConfig, str(tmp_path))


def test_help_shows_each_keys_valid_values():
    from hybridrl.cli import _keys_help

    text = _keys_help(RLConfig)
    assert "  actor_rollout_ref.actor.grad_clip = 1.0\n      max global gradient norm (a number; > 0)\n" in text
    assert "(a string; one of error, left, right)" in text and "(an integer; -1 or at least 1)" in text
