"""`auto` precision (config/precision_auto.py): bf16 compute, a bf16 engine and token TIS where the hardware has
fast bf16, fp32 everywhere else; explicit values are kept; HYBRIDRL_AUTO_DTYPE pins the choice."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import precision_auto
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import validate_rl_config
from hybridrl.errors import ConfigError

AVX512_BF16 = {"avx2", "avx512f", "avx512_bf16"}
AVX2 = {"avx2", "fma"}
MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU's flags as /proc/cpuinfo would give them, with no HYBRIDRL_AUTO_DTYPE pin."""
    monkeypatch.delenv(precision_auto.AUTO_ENV, raising=False)

    def use(flags):
        monkeypatch.setattr(precision_auto, "cpu_flags", lambda: flags)
    return use


def resolved(*overrides: str) -> tuple[str, str, str | None, str]:
    cfg = load_config(RLConfig, None, list(overrides))
    return (cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype, cfg.actor_rollout_ref.rollout.dtype,
            cfg.algorithm.rollout_correction.rollout_is, cfg.critic.model.fsdp_config.mixed_precision.param_dtype)


def test_fast_bf16_cpu_gets_bf16_compute_a_bf16_engine_and_token_tis(cpu):
    cpu(AVX512_BF16)
    assert resolved() == ("bf16", "bfloat16", "token", "bf16")
    for flag in ("amx_bf16", "bf16"):  # AMX; aarch64's BF16 (`Features: ... bf16`)
        cpu({flag})
        assert resolved()[:3] == ("bf16", "bfloat16", "token")


@pytest.mark.parametrize("flags", [AVX2, set(), None])  # AVX2 only; no flag; /proc/cpuinfo unreadable (macOS)
def test_cpu_without_bf16_instructions_stays_fp32_with_no_correction(cpu, flags):
    cpu(flags)
    assert resolved() == ("fp32", "float32", None, "fp32")


def test_explicit_values_are_kept_and_the_rest_follow_them(cpu):
    cpu(AVX512_BF16)
    # fp32 asked on a bf16 machine: the engine follows to float32, so no correction
    assert resolved(f"{MP}=fp32")[:3] == ("fp32", "float32", None)
    # TIS switched off explicitly stays off; an explicit engine dtype stays
    assert resolved("algorithm.rollout_correction.rollout_is=null")[:3] == ("bf16", "bfloat16", None)
    assert resolved("actor_rollout_ref.rollout.dtype=float32")[:3] == ("bf16", "float32", None)
    assert resolved("algorithm.rollout_correction.rollout_is=sequence")[2] == "sequence"
    cpu(AVX2)  # bf16 asked on an AVX2 machine: granted, and the engine follows it
    assert resolved(f"{MP}=bfloat16")[:3] == ("bfloat16", "bfloat16", "token")


def test_the_env_pin_wins_over_the_hardware_and_a_bad_one_is_named(cpu, monkeypatch):
    cpu(AVX2)
    monkeypatch.setenv(precision_auto.AUTO_ENV, "bf16")
    assert resolved()[:3] == ("bf16", "bfloat16", "token")
    cpu(AVX512_BF16)
    monkeypatch.setenv(precision_auto.AUTO_ENV, "fp32")
    assert resolved()[:3] == ("fp32", "float32", None)
    monkeypatch.setenv(precision_auto.AUTO_ENV, "fp16")
    with pytest.raises(ConfigError, match="HYBRIDRL_AUTO_DTYPE='fp16': use fp32 or bf16"):
        resolved()


@pytest.mark.parametrize("bf16_gpu, expected", [(True, "bf16"), (False, "fp32")])
def test_cuda_follows_the_gpu_not_the_cpu(cpu, monkeypatch, bf16_gpu, expected):
    cpu(AVX2 if bf16_gpu else AVX512_BF16)  # the CPU's flags do not matter on a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_gpu)
    assert precision_auto.auto_compute_dtype("cuda:1")[0] == expected


def test_the_plan_names_each_resolved_key_and_why(cpu):
    cpu(AVX512_BF16)
    plan = validate_rl_config(load_config(RLConfig, None, []))
    auto = [note for note in plan.derived if "(auto:" in note]
    assert auto == [f"{MP}=bf16 (auto: this CPU has bf16 instructions (hybridrl doctor))",
                    "actor_rollout_ref.rollout.dtype=bfloat16 (auto: the actor's compute dtype)",
                    "algorithm.rollout_correction.rollout_is=token (auto: the engine generates in bfloat16, so its "
                    "probabilities differ from the trainer's)"]
    assert "derived (keys left null or auto):" in plan.describe()


def test_cpu_flags_read_from_cpuinfo(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    assert precision_auto.cpu_flags() == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert precision_auto.cpu_has_fast_bf16() is True
    assert precision_auto.cpu_has_fast_bf16({"avx2"}) is False
