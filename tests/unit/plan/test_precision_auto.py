"""`auto` precision (plan/precision_auto.py): bf16 compute, a bf16 engine and token TIS where the hardware has
fast bf16, fp32 everywhere else; explicit values are kept; HYBRIDRL_AUTO_DTYPE pins the choice."""

from __future__ import annotations

import pytest
import torch

from hybridrl.plan import precision_auto
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import fill_precision, validate_rl_config
from hybridrl.errors import ConfigError

AVX512_BF16 = {"avx2", "avx512f", "avx512_bf16"}
AVX2 = {"avx2", "fma"}
MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU's flags as /proc/cpuinfo would give them, with no HYBRIDRL_AUTO_DTYPE pin and no oneDNN cap."""
    for name in (precision_auto.AUTO_ENV, *precision_auto.ONEDNN_ISA_ENV):
        monkeypatch.delenv(name, raising=False)

    def use(flags):
        monkeypatch.setattr(precision_auto, "cpu_flags", lambda: flags)
    return use


def resolved(*overrides: str) -> tuple[str, str, str | None, str]:
    cfg = load_config(RLConfig, None, list(overrides))
    fill_precision(cfg)  # what plan/resolve.py does first
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
    for name in precision_auto.ONEDNN_ISA_ENV:
        monkeypatch.delenv(name, raising=False)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    assert precision_auto.cpu_flags() == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert precision_auto.cpu_has_fast_bf16() is True
    assert precision_auto.cpu_has_fast_bf16({"avx2"}) is False


@pytest.mark.parametrize("cap, expected", [
    ("AVX2", "fp32"),  # the AVX2-only emulation the benchmarks use: bf16 matmuls at ~2 GFLOP/s
    ("SSE41", "fp32"),
    ("avx2_vnni_2", "fp32"),  # bf16 conversions only; lowercase, as oneDNN accepts it
    ("AVX512_CORE_VNNI", "fp32"),  # the ISA just below AVX512_CORE_BF16
    ("AVX512_CORE_BF16", "bf16"),  # the first ISA with bf16 dot products
    ("avx10_1_512_amx", "bf16"),
    ("AVX512_CORE_AMX", "bf16"),  # AVX10_1_512_AMX's older name
    ("DEFAULT", "bf16"), ("all", "bf16"),  # no cap
    ("BOGUS", "bf16"), (" AVX2", "bf16"),  # names oneDNN does not know (it does not strip), so it ignores them
])
def test_a_onednn_cap_below_bf16_keeps_fp32(cpu, monkeypatch, cap, expected):
    cpu(AVX512_BF16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert resolved()[0] == expected
    dtype, why = precision_auto.auto_compute_dtype("cpu")
    assert dtype == expected
    capped = f"ONEDNN_MAX_CPU_ISA={cap} caps oneDNN below bf16, so bf16 would be emulated (hybridrl doctor)"
    assert why == (capped if expected == "fp32" else "this CPU has bf16 instructions (hybridrl doctor)")


@pytest.mark.parametrize("onednn, dnnl, expected", [
    (None, "AVX2", "fp32"),  # the older name alone
    ("", "avx2", "fp32"),  # an empty ONEDNN_MAX_CPU_ISA counts as unset, as oneDNN reads it
    ("ALL", "AVX2", "bf16"),  # the newer name wins
    ("AVX2", "ALL", "fp32"),
])
def test_the_older_dnnl_name_counts_when_the_newer_one_is_unset(cpu, monkeypatch, onednn, dnnl, expected):
    cpu(AVX512_BF16)
    if onednn is not None:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", onednn)
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", dnnl)
    dtype, why = precision_auto.auto_compute_dtype("cpu")
    assert dtype == expected
    if expected == "fp32":
        assert why.startswith("ONEDNN_MAX_CPU_ISA=AVX2 caps" if onednn else f"DNNL_MAX_CPU_ISA={dnnl} caps")


def test_a_cap_matters_only_to_x86_bf16_instructions(cpu, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    cpu(AVX2)  # no bf16 instructions: no cap lets oneDNN use what the CPU lacks
    assert precision_auto.auto_compute_dtype("cpu") == (
        "fp32", "this CPU has no bf16 instructions, so bf16 would be emulated (hybridrl doctor)")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    cpu({"asimd", "bf16"})  # aarch64: x86 ISA names mean nothing to its oneDNN
    assert precision_auto.auto_compute_dtype("cpu")[0] == "bf16"
    assert precision_auto.onednn_isa_cap(None) is None  # /proc/cpuinfo unreadable


def test_the_env_pin_wins_over_a_onednn_cap(cpu, monkeypatch):
    cpu(AVX512_BF16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv(precision_auto.AUTO_ENV, "bf16")
    assert resolved()[:3] == ("bf16", "bfloat16", "token")


def test_atens_cpu_capability_is_no_cap(cpu, monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 picks ATen's own kernels; bf16 matmuls run in oneDNN at full speed (measured)."""
    cpu(AVX512_BF16)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert resolved()[0] == "bf16"


def test_the_plan_says_which_cap_kept_fp32(cpu, monkeypatch):
    cpu(AVX512_BF16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    plan = validate_rl_config(load_config(RLConfig, None, []))
    assert (f"{MP}=fp32 (auto: ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below bf16, so bf16 would be emulated "
            "(hybridrl doctor))") in plan.derived
