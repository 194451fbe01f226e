"""The nearest settings that fit a memory budget (config/memory.py's refusal): the largest batch
knobs that fit under the same estimate, else more workers, before FSDP2 sharding."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

from hybridrl.config.derive import actor_plan
from hybridrl.config.memory import SHARDED, Phase, PoolMemory, estimate_memory, fmt_bytes
from hybridrl.config.plan import largest_divisor
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError


def propose_fixes(cfg: RLConfig, over: list[PoolMemory]) -> list[dict[str, Any]]:
    """Smaller batch knobs if they suffice (the largest values that fit), else more workers (and FSDP2)."""
    knobs = _fit_knobs(cfg, {})
    if knobs:
        return [knobs]
    workers = _fit_workers(cfg, {p.name for p in over})
    return [workers] if workers else []


def _with(cfg: RLConfig, overrides: dict[str, Any]) -> RLConfig:
    out = copy.deepcopy(cfg)
    for key, value in overrides.items():
        *path, last = key.split(".")
        setattr(functools.reduce(getattr, path, out), last, value)
    return out


def _try_estimate(cfg: RLConfig) -> tuple[PoolMemory, ...] | None:
    """The pools of a candidate config, or None when its batch sizes are inconsistent (or a model
    folder cannot be read: check_memory reports that)."""
    try:
        return estimate_memory(cfg, actor_plan(cfg)).pools
    except ConfigError:
        return None


def fit_derived(cfg: RLConfig, knobs: set[str]) -> dict[str, int]:
    """{knob: the largest value with which its phases fit} for the `knobs` (micro-batch sizes derived
    because they were left null) whose phases exceed the memory estimate; {} when all fit, when the
    estimate cannot be made, or when no value fits (check_memory then refuses with its fixes)."""
    overrides: dict[str, int] = {}
    for _ in range(len(knobs)):  # each round settles one knob
        pools = _try_estimate(_with(cfg, overrides))
        failing = [(pool, ph) for pool in pools or () for ph in pool.phases
                   if pool.total(ph) > pool.budget and ph.knob in knobs and ph.knob not in overrides]
        if not failing:
            break
        pool, phase = failing[0]
        value = _largest_knob(cfg, overrides, pool.name, phase)
        if value is None:
            break
        overrides[phase.knob] = value
    return overrides


def _phase_fits(cfg: RLConfig, pool_name: str, phase_name: str) -> bool:
    pools = _try_estimate(cfg)
    if pools is None:
        return False
    pool = next(p for p in pools if p.name == pool_name)
    return all(pool.total(ph) <= pool.budget for ph in pool.phases if ph.name == phase_name)


def _last_true(values: list[int], pred: Callable[[int], bool]) -> int | None:
    """The largest of ascending `values` for which pred holds, pred being true on a prefix (bisection)."""
    lo, hi = 0, len(values)  # pred holds below lo, fails from hi on
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if pred(values[mid]) else (lo, mid)
    return values[lo - 1] if lo else None


def _largest_knob(cfg: RLConfig, overrides: dict[str, Any], pool: str, phase: Phase) -> int | None:
    """The largest valid value of the phase's knob, below the one in effect, with which the phase fits."""
    values = [v for v in range(1, phase.knob_value) if not phase.knob_divides or phase.knob_divides % v == 0]
    return _last_true(values, lambda v: _phase_fits(_with(cfg, {**overrides, phase.knob: v}), pool, phase.name))


def _fit_knobs(cfg: RLConfig, base: dict[str, Any]) -> dict[str, Any] | None:
    """`base` plus, phase by phase, the largest knob value that makes the phase fit; None if some
    over-budget phase has no knob or does not fit even at 1."""
    overrides = dict(base)
    for _ in range(16):  # each round settles one phase; a config has fewer knobs than that
        pools = _try_estimate(_with(cfg, overrides))
        if pools is None:
            return None
        failing = [(pool, ph) for pool in pools for ph in pool.phases if pool.total(ph) > pool.budget]
        if not failing:
            return overrides
        pool, phase = failing[0]
        if phase.knob is None:
            return None
        value = _largest_knob(cfg, overrides, pool.name, phase)
        if value is None:
            return None
        overrides[phase.knob] = value
    return None


def _micro_for(key: str, micro: int, per_worker: int) -> dict[str, int]:
    """{key: the largest divisor of a worker's new mini-batch share up to `micro`}; {} if `micro` divides it."""
    if per_worker % micro == 0:
        return {}
    return {key: largest_divisor(per_worker, micro)}


def _fit_workers(cfg: RLConfig, pools: set[str]) -> dict[str, Any] | None:
    """The first layout of `_more_workers` that fits, with any knob it still needs."""
    return next((found for base in _more_workers(cfg, pools) if (found := _fit_knobs(cfg, base)) is not None), None)


def _more_workers(cfg: RLConfig, pools: set[str]) -> Iterator[dict[str, Any]]:
    """Layouts with more workers, fewest first: world sizes that split a mini-batch evenly, replicas
    before FSDP2, the micro-batch cut to divide each worker's new share. Only the actor pool and a
    critic pool scale so: each reward-model worker holds the whole (inference-only) model."""
    from hybridrl.config.validate import needs_critic

    arr, tr, c = cfg.actor_rollout_ref, cfg.trainer, cfg.critic
    if "actor" in pools:
        world, mini = tr.n_gpus_per_node * tr.nnodes, arr.actor.ppo_mini_batch_size * arr.rollout.n
        shard = {} if arr.actor.strategy in SHARDED else {"actor_rollout_ref.actor.strategy": "fsdp2"}
        with_critic = needs_critic(cfg) and c.n_workers is None and c.strategy not in SHARDED
        strategies = [{}, shard] + ([{**shard, "critic.strategy": "fsdp2"}] if with_critic else [])
        backend = {"trainer.backend": "ray"} if tr.backend == "local" else {}
        for w in (w for w in range(world + 1, mini + 1) if mini % w == 0):
            micro = _micro_for("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                               arr.actor.ppo_micro_batch_size_per_gpu, mini // w)
            layouts = [{"trainer.n_gpus_per_node": w // tr.nnodes}] * (w % tr.nnodes == 0) + \
                      [{"trainer.nnodes": w // tr.n_gpus_per_node}] * (w % tr.n_gpus_per_node == 0)
            yield from ({**backend, **layout, **strategy, **micro} for layout in layouts for strategy in strategies)
    elif "critic" in pools and c.n_workers is not None:
        mini = (c.ppo_mini_batch_size or arr.actor.ppo_mini_batch_size) * arr.rollout.n
        strategies = [{}] + ([] if c.strategy in SHARDED else [{"critic.strategy": "fsdp2"}])
        for w in (w for w in range(c.n_workers + 1, mini + 1) if mini % w == 0):
            micro = _micro_for("critic.ppo_micro_batch_size_per_gpu",
                               c.ppo_micro_batch_size_per_gpu or arr.actor.ppo_micro_batch_size_per_gpu, mini // w)
            yield from ({"critic.n_workers": w, **strategy, **micro} for strategy in strategies)


def refusal(over: list[PoolMemory], fixes: list[dict[str, Any]]) -> str:
    reasons = []
    for p in over:
        ph, resident = p.peak, sum(p.resident.values())
        if resident > p.budget:
            why = f"its resident states alone ({', '.join(p.resident)}) take {fmt_bytes(resident)}"
        else:
            name, size = max(ph.parts.items(), key=lambda kv: kv[1])
            why = f"{ph.name} adds {fmt_bytes(sum(ph.parts.values()))} to {fmt_bytes(resident)} of resident states, " \
                  f"most of it {name} ({fmt_bytes(size)})"
            if ph.knob:
                why += f", which grows with {ph.knob} ({ph.knob_value} in effect)"
        reasons.append(f"the {p.name} pool needs about {fmt_bytes(p.peak_bytes)} per worker at its peak ({ph.name}), "
                       f"more than its budget of {fmt_bytes(p.budget)} ({p.budget_source}): {why}")
    if fixes:
        fix = "it fits with " + "; or with ".join(" ".join(f"{k}={v}" for k, v in f.items()) for f in fixes)
    else:
        fix = ("no micro-batch size or worker count fits; use a smaller model, shorter data.max_prompt_length + "
               "data.max_response_length, or workers with more memory")
    return (f"{'; '.join(reasons)}; {fix}; or, if a worker has more memory than that, set "
            "trainer.memory_per_worker_gb to it in GiB (the estimate is approximate; `hybridrl plan` shows its parts)")
