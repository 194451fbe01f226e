"""The precision, checkpointing and offload levers of a config (plan/levers.py): the effective dtype of
each pass, the combinations refused with a one-line fix, and `hybridrl plan`'s offload note."""

from __future__ import annotations

import re

import pytest

from hybridrl import cli
from hybridrl.plan.levers import (
    actor_dtypes,
    check_levers,
    critic_dtypes,
    offload_note,
    ref_compute_dtype,
    ref_model_dtype,
    rollout_compute_dtype,
)
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import fill_precision, validate_rl_config
from hybridrl.errors import ConfigError

ACTOR_MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision"


def config(*overrides: str) -> RLConfig:
    """The config as loaded, its `auto` precision keys resolved (plan/resolve.py's first step)."""
    cfg = load_config(RLConfig, None, list(overrides))
    fill_precision(cfg)
    return cfg


def test_each_pass_gets_its_effective_dtypes():
    cfg = config()
    assert actor_dtypes(cfg) == critic_dtypes(cfg) == ("fp32", "fp32")
    assert (ref_compute_dtype(cfg), ref_model_dtype(cfg), rollout_compute_dtype(cfg)) == ("fp32", "fp32", "fp32")
    cfg = config(f"{ACTOR_MP}.param_dtype=bfloat16", f"{ACTOR_MP}.reduce_dtype=bf16",
                 "actor_rollout_ref.rollout.dtype=bfloat16", "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16")
    assert actor_dtypes(cfg) == ("bf16", "bf16")
    assert critic_dtypes(cfg) == ("fp32", "fp32")  # the critic has its own section
    # the reference follows the actor's compute dtype unless it sets its own
    assert (ref_compute_dtype(cfg), ref_model_dtype(cfg), rollout_compute_dtype(cfg)) == ("bf16", "bf16", "bf16")
    cfg = config(f"{ACTOR_MP}.param_dtype=bf16", "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32")
    assert ref_compute_dtype(cfg) == "fp32"
    assert critic_dtypes(config("critic.model.fsdp_config.mixed_precision.param_dtype=bf16")) == ("bf16", "fp32")


def test_checkpointing_with_padded_prompt_sharing_is_refused_with_its_fix():
    gc = "actor_rollout_ref.model.enable_gradient_checkpointing=true"
    with pytest.raises(ConfigError, match=re.escape(
            "set actor_rollout_ref.model.share_prompt_prefix=false or actor_rollout_ref.model.use_remove_padding=true")):
        validate_rl_config(config(gc))
    validate_rl_config(config(gc, "actor_rollout_ref.model.share_prompt_prefix=false"))
    validate_rl_config(config(gc, "actor_rollout_ref.model.use_remove_padding=true"))
    # the critic never shares prompts: its checkpointing needs nothing else
    validate_rl_config(config("critic.model.enable_gradient_checkpointing=true", "algorithm.adv_estimator=gae"))


@pytest.mark.parametrize("section, strategy", [("actor_rollout_ref.actor", "actor_rollout_ref.actor.strategy"),
                                               ("critic.model", "critic.strategy")])
def test_param_offload_on_a_gpu_needs_fsdp2(section, strategy):
    # check_levers directly: validate_rl_config first refuses trainer.device=cuda on this GPU-less machine
    cfg = config("trainer.device=cuda", f"{section}.fsdp_config.param_offload=true")
    with pytest.raises(ConfigError, match=re.escape(
            f"{section}.fsdp_config.param_offload=true is FSDP2's CPU offload, but {strategy}=ddp; set "
            f"{strategy}=fsdp2 or {section}.fsdp_config.param_offload=false")):
        check_levers(cfg, needs_critic=True, needs_reference=False)
    check_levers(config("trainer.device=cuda", f"{section}.fsdp_config.param_offload=true", f"{strategy}=fsdp2"),
                 needs_critic=True, needs_reference=False)
    # optimizer offload and the reference's offload work with either strategy; on a CPU nothing is refused
    check_levers(config("trainer.device=cuda", f"{section}.fsdp_config.optimizer_offload=true",
                        "actor_rollout_ref.ref.fsdp_config.param_offload=true"), needs_critic=True, needs_reference=True)
    check_levers(config(f"{section}.fsdp_config.param_offload=true"), needs_critic=True, needs_reference=False)


def test_offload_note_names_the_keys_that_do_nothing_on_a_cpu():
    assert offload_note(config()) is None
    note = offload_note(config("actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
                               "critic.model.fsdp_config.param_offload=true"))
    assert note == ("offload: actor_rollout_ref.actor.fsdp_config.optimizer_offload, "
                    "critic.model.fsdp_config.param_offload have no effect with trainer.device=cpu (weights and AdamW "
                    "state are in host memory already)")
    assert offload_note(config("trainer.device=cuda", "actor_rollout_ref.ref.fsdp_config.param_offload=true")) is None


def test_plan_prints_the_offload_note(capsys):
    cli.main(["plan", "actor_rollout_ref.ref.fsdp_config.param_offload=true"])
    lines = capsys.readouterr().out.splitlines()
    assert ("offload: actor_rollout_ref.ref.fsdp_config.param_offload has no effect with trainer.device=cpu "
            "(weights and AdamW state are in host memory already)") in lines
    cli.main(["plan"])
    assert "offload:" not in capsys.readouterr().out
