"""`auto` precision (the default): bf16 where the hardware computes it fast, fp32 everywhere else.

Three keys default to `auto` and are resolved together, once, first thing when the config is resolved
(plan/resolve.py calls `resolve_auto_precision`), so every reader (the checks, the memory estimate, the
roles, the Ray workers, the saved config and `hybridrl plan`) sees concrete values:

- `*.fsdp_config.mixed_precision.param_dtype` (the actor's and the critic's compute dtype): bf16 on a
  CUDA GPU with bf16 support and on a CPU with bf16 instructions (AVX512-BF16, AMX, aarch64's BF16),
  where bf16 matmuls run about 2x fp32; fp32 elsewhere (an AVX2-only CPU emulates bf16 at ~1 GFLOP/s), and on
  an x86 CPU whose oneDNN is capped below bf16 by ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), which emulates it too.
  (ATEN_CPU_CAPABILITY does not slow bf16 matmuls: they run in oneDNN, not in ATen's kernels.)
  The weights and AdamW state stay fp32 either way (master weights, models/precision.py).
- `actor_rollout_ref.rollout.dtype`: the generation dtype follows the actor's compute dtype, so a bf16
  trainer is fed by a bf16 engine (half the bytes read per decode step) and an fp32 one by fp32 (whose
  log-probs are the trainer's to ~1e-6).
- `algorithm.rollout_correction.rollout_is`: token-level truncated importance sampling when the engine
  generates in a dtype below fp32. The engine/trainer probability gap then grows from ~1e-6 to ~0.08
  (measured, README "Precision"), which is what TIS corrects (Yao et al. 2025, "Your efficient RL
  framework secretly brings you off-policy RL training"); off with an fp32 engine, where it is ~1.

This is the configuration validated on the default task (bench/precision_curves.py: two seeds per
precision, docs/bf16_vs_fp32.png). Setting any key explicitly keeps it. `HYBRIDRL_AUTO_DTYPE=fp32`
(or `bf16`) pins what `auto` resolves to whatever the hardware: the test suite sets it so results do not
depend on the machine kind, and a user can use it to reproduce a run across kinds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Optional

from hybridrl.errors import ConfigError

AUTO = "auto"
AUTO_ENV = "HYBRIDRL_AUTO_DTYPE"
# bf16 matmuls in hardware: x86's AVX512-BF16 and AMX (`lscpu` flags), run by oneDNN; aarch64's BF16 (BFMMLA)
X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
FAST_BF16_FLAGS = X86_BF16_FLAGS + ("bf16",)
# oneDNN reads the first of these that is set and not empty (measured: ONEDNN_MAX_CPU_ISA=ALL with
# DNNL_MAX_CPU_ISA=AVX2 runs bf16 at full speed, and the reverse at 2 GFLOP/s).
ONEDNN_ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# The caps oneDNN documents (https://oneapi-src.github.io/oneDNN/dev_guide_cpu_dispatcher_control.html) that stop
# below AVX512_CORE_BF16, so bf16 dot products are emulated: on an EPYC with avx512_bf16, one thread, a 512x512
# bf16 matmul ran 2.3 GFLOP/s capped at SSE41..AVX2_VNNI_2 and 37 at AVX512_CORE(_VNNI), against 220 uncapped
# and 100 for fp32. AVX2_VNNI_2 has bf16 conversions, not dot products. Every other documented name
# (AVX512_CORE_BF16, AVX10_1_512 = AVX512_CORE_FP16, AVX10_1_512_AMX = AVX512_CORE_AMX, AVX10_1_512_AMX_FP16,
# AVX10_2_512, AVX10_2_512_AMX_2, DEFAULT, ALL) keeps bf16 at full speed. A name not listed is no cap: oneDNN
# ignores a value it does not know (measured: BOGUS, " AVX2" and oneDNN 2's AVX512_MIC run at full speed), so
# guessing would be wrong more often than right; the names oneDNN added lately (AVX10_*) are above bf16. Should it
# add one below, list it here.
ISA_CAPS_BELOW_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                                 "AVX512_CORE_VNNI"})


def cpu_flags() -> Optional[set[str]]:
    """The CPU's feature flags from /proc/cpuinfo (x86 `flags`, aarch64 `Features`); None where unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return None


def cpu_has_bf16_instructions(flags: Iterable[str] | None) -> bool:
    """The CPU computes bf16 matmuls in hardware (FAST_BF16_FLAGS), whether or not oneDNN is allowed to."""
    return bool(flags and any(f in flags for f in FAST_BF16_FLAGS))


def onednn_cap_setting(environ: Mapping[str, str | None] = os.environ) -> tuple[str, str] | None:
    """(variable, value) of the ONEDNN_ISA_ENV variable oneDNN reads (the first set and not empty), or None."""
    for name in ONEDNN_ISA_ENV:
        value = environ.get(name)
        if value:
            return name, value
    return None


def onednn_isa_cap(flags: Iterable[str] | None, environ: Mapping[str, str | None] = os.environ) -> str | None:
    """'ONEDNN_MAX_CPU_ISA=AVX2' (the variable as set) when it caps oneDNN below this x86 CPU's bf16 dot products,
    else None. `environ` maps a name to its value or None (doctor's facts). x86 only: these names are x86 ISAs,
    which aarch64's oneDNN (bf16 through ACL, its own ISA names) does not know."""
    if not flags or not any(f in flags for f in X86_BF16_FLAGS):
        return None
    setting = onednn_cap_setting(environ)
    if setting is None:
        return None
    name, value = setting  # compared as oneDNN does: case-insensitive, not stripped
    return f"{name}={value}" if value.upper() in ISA_CAPS_BELOW_BF16 else None


def cpu_has_fast_bf16(flags: Iterable[str] | None = None, environ: Mapping[str, str | None] = os.environ) -> bool:
    """bf16 instructions that oneDNN may use: the CPU has them and no ONEDNN_MAX_CPU_ISA caps them off."""
    flags = cpu_flags() if flags is None else flags
    return cpu_has_bf16_instructions(flags) and onednn_isa_cap(flags, environ) is None


def auto_compute_dtype(device: str) -> tuple[str, str]:
    """('fp32' | 'bf16', why) for `auto` on `device` (trainer.device: cpu | cuda | cuda:N)."""
    pinned = os.environ.get(AUTO_ENV, "").strip().lower()
    if pinned:
        if pinned not in ("fp32", "bf16"):
            raise ConfigError(f"{AUTO_ENV}={pinned!r}: use fp32 or bf16 (or unset it to choose by the hardware)")
        return pinned, f"{AUTO_ENV}={pinned}"
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16", "this GPU computes bf16"
        return "fp32", "this GPU has no bf16"
    flags = cpu_flags()
    if not cpu_has_bf16_instructions(flags):
        return "fp32", "this CPU has no bf16 instructions, so bf16 would be emulated (hybridrl doctor)"
    cap = onednn_isa_cap(flags)
    if cap:
        return "fp32", f"{cap} caps oneDNN below bf16, so bf16 would be emulated (hybridrl doctor)"
    return "bf16", "this CPU has bf16 instructions (hybridrl doctor)"


Machine = Callable[[str], tuple[str, str]]  # trainer.device -> ('fp32' | 'bf16', why): what `auto` computes in there


def resolve_auto_precision(cfg, machine: Optional[Machine] = None) -> list[str]:
    """Replace every `auto` of the three keys (module doc) of `cfg`, an RLConfig, in place; one note per key
    resolved, for the plan. `machine`: the compute dtype of a device (default: auto_compute_dtype, this machine's)."""
    machine = auto_compute_dtype if machine is None else machine
    notes: list[str] = []
    arr, device = cfg.actor_rollout_ref, cfg.trainer.device
    sections = (("actor_rollout_ref.actor.fsdp_config.mixed_precision", arr.actor.fsdp_config.mixed_precision),
                ("critic.model.fsdp_config.mixed_precision", cfg.critic.model.fsdp_config.mixed_precision))
    for key, mp in sections:
        if str(mp.param_dtype).lower() == AUTO:
            mp.param_dtype, why = machine(device)
            if key.startswith("actor_rollout_ref"):
                notes.append(f"{key}.param_dtype={mp.param_dtype} (auto: {why})")
    if arr.rollout.dtype == AUTO:
        actor = str(arr.actor.fsdp_config.mixed_precision.param_dtype).lower()
        arr.rollout.dtype = "bfloat16" if actor in ("bf16", "bfloat16") else "float32"  # fp16 is refused later
        notes.append(f"actor_rollout_ref.rollout.dtype={arr.rollout.dtype} (auto: the actor's compute dtype)")
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_is == AUTO:
        rc.rollout_is = None if arr.rollout.dtype == "float32" else "token"
        if rc.rollout_is:
            notes.append(f"algorithm.rollout_correction.rollout_is=token (auto: the engine generates in "
                         f"{arr.rollout.dtype}, so its probabilities differ from the trainer's)")
    return notes
