"""`auto` precision (the default): bf16 where the hardware computes it fast, fp32 everywhere else.

Three keys default to `auto` and are resolved together, once, when the config object is made
(`RLConfig.__post_init__` calls `resolve_auto_precision`), so every reader (the checks, the memory
estimate, the roles, the Ray workers, the saved config and `hybridrl plan`) sees concrete values:

- `*.fsdp_config.mixed_precision.param_dtype` (the actor's and the critic's compute dtype): bf16 on a
  CUDA GPU with bf16 support and on a CPU with bf16 instructions (AVX512-BF16, AMX, aarch64's BF16),
  where bf16 matmuls run about 2x fp32; fp32 elsewhere (an AVX2-only CPU emulates bf16 at ~1 GFLOP/s).
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
from typing import Optional

from hybridrl.errors import ConfigError

AUTO = "auto"
AUTO_ENV = "HYBRIDRL_AUTO_DTYPE"
# x86's AVX512-BF16 and AMX (`lscpu` flags), aarch64's BF16 (BFMMLA): bf16 matmuls in hardware
FAST_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


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


def cpu_has_fast_bf16(flags: Optional[set[str]] = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return bool(flags and any(f in flags for f in FAST_BF16_FLAGS))


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
    if cpu_has_fast_bf16():
        return "bf16", "this CPU has bf16 instructions (hybridrl doctor)"
    return "fp32", "this CPU has no bf16 instructions, so bf16 would be emulated (hybridrl doctor)"


def resolve_auto_precision(cfg) -> list[str]:
    """Replace every `auto` of the three keys (module doc) of `cfg`, an RLConfig, in place; one note per key
    resolved, for the plan. (Untyped: schema.py imports this module, so this one does not import it back.)"""
    notes: list[str] = []
    arr, device = cfg.actor_rollout_ref, cfg.trainer.device
    sections = (("actor_rollout_ref.actor.fsdp_config.mixed_precision", arr.actor.fsdp_config.mixed_precision),
                ("critic.model.fsdp_config.mixed_precision", cfg.critic.model.fsdp_config.mixed_precision))
    for key, mp in sections:
        if str(mp.param_dtype).lower() == AUTO:
            mp.param_dtype, why = auto_compute_dtype(device)
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
