"""The nearest settings that fit a memory budget (plan/memory.py's refusal): the memory levers that are
off (activation checkpointing, padding-free packing, bf16 compute and a bf16 reference, token-budget
micro-batches), the largest batch knobs that fit under the same estimate, else more workers, before
FSDP2 sharding."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

from hybridrl.plan.levers import dtype_name
from hybridrl.plan.memory import SHARDED, MemoryBudgetError, MemoryReport, Phase, PoolMemory, estimate_memory, fmt_bytes
from hybridrl.plan.batch_plan import BatchPlan, largest_divisor
from hybridrl.plan.roles import actor_plan, critic_pool_workers, needs_critic, needs_reference
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError

MODEL, ACTOR = "actor_rollout_ref.model", "actor_rollout_ref.actor"
LEVERS = {  # what each lever key does, for the refusal's wording
    f"{MODEL}.enable_gradient_checkpointing": "activation checkpointing",
    f"{MODEL}.use_remove_padding": "padding-free packing",
    f"{ACTOR}.fsdp_config.mixed_precision.param_dtype": "bf16 compute",
    "actor_rollout_ref.ref.fsdp_config.model_dtype": "bf16 reference weights",
    f"{ACTOR}.use_dynamic_bsz": "token-budget micro-batches",
    "critic.model.enable_gradient_checkpointing": "the critic's activation checkpointing",
}
MAX_FIXES = 3


def propose_fixes(cfg: RLConfig, over: list[PoolMemory]) -> list[dict[str, Any]]:
    """Up to MAX_FIXES override sets that fit: the memory levers that are off and fit by themselves (cheapest first),
    else the levers that lower the peak, together, with the largest batch knobs that fit; smaller batch knobs
    alone; and, when none of these fits, more workers (with those levers if need be)."""
    levers = [lv for lv in lever_sets(cfg) if _lowers_peak(cfg, lv, over)]
    fixes = [lv for lv in levers if _fits(_with(cfg, lv))][:MAX_FIXES - 1]  # room for the knobs alone
    useful = {k: v for lv in levers for k, v in lv.items()}
    if not fixes and useful and (found := _fit_knobs(cfg, useful)) is not None:
        fixes.append(found)
    if (knobs := _fit_knobs(cfg, {})) is not None and knobs:
        fixes.append(knobs)
    if not fixes:
        names = {p.name for p in over}
        workers = _fit_workers(cfg, names, {}) or (_fit_workers(cfg, names, useful) if useful else None)
        fixes += [workers] if workers else []
    return fixes[:MAX_FIXES]


def _lowers_peak(cfg: RLConfig, lever: dict[str, Any], over: list[PoolMemory]) -> bool:
    """Whether a lever lowers the peak of some over-budget pool."""
    pools = _try_estimate(_with(cfg, lever))
    if pools is None:
        return False
    peaks = {p.name: p.peak_bytes for p in pools}
    return any(peaks.get(p.name, p.peak_bytes) < p.peak_bytes for p in over)


def lever_sets(cfg: RLConfig) -> list[dict[str, Any]]:
    """The memory levers this config leaves off, one override set each, in order of what they cost: activation
    checkpointing (one more forward of the layers; with the padded prompt sharing it needs packing, as HF's
    checkpointed layers drop the KV cache), packing (none), bf16 compute and reference weights (precision),
    token budgets (the budget ppo_max_token_len_per_gpu, which the knob search then cuts to what fits)."""

    arr = cfg.actor_rollout_ref
    m, a = arr.model, arr.actor
    out = []
    if not m.enable_gradient_checkpointing:
        ckpt: dict[str, Any] = {f"{MODEL}.enable_gradient_checkpointing": True}
        if m.share_prompt_prefix and not m.use_remove_padding:
            ckpt[f"{MODEL}.use_remove_padding"] = True
        out.append(ckpt)
    if not m.use_remove_padding:
        out.append({f"{MODEL}.use_remove_padding": True})
    bf16: dict[str, Any] = {}
    if dtype_name("", a.fsdp_config.mixed_precision.param_dtype) == "fp32":
        bf16[f"{ACTOR}.fsdp_config.mixed_precision.param_dtype"] = "bf16"
        if arr.rollout.dtype == "float32":  # as estimated: rollout.dtype=auto would follow the actor to bf16
            bf16["actor_rollout_ref.rollout.dtype"] = "float32"
    if needs_reference(cfg) and m.lora_rank == 0 and dtype_name("", arr.ref.fsdp_config.model_dtype) == "fp32":
        bf16["actor_rollout_ref.ref.fsdp_config.model_dtype"] = "bf16"
        bf16["actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype"] = "bf16"
    if bf16:
        out.append(bf16)
    if not a.use_dynamic_bsz:
        out.append({f"{ACTOR}.use_dynamic_bsz": True})
    if needs_critic(cfg) and not cfg.critic.model.enable_gradient_checkpointing:
        out.append({"critic.model.enable_gradient_checkpointing": True})
    return out


def _fits(cfg: RLConfig) -> bool:
    pools = _try_estimate(cfg)
    return pools is not None and all(p.peak_bytes <= p.budget for p in pools)


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
    values = [v for v in range(phase.knob_min, phase.knob_value)
              if not phase.knob_divides or phase.knob_divides % v == 0]
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


def _fit_workers(cfg: RLConfig, pools: set[str], levers: dict[str, Any]) -> dict[str, Any] | None:
    """The first layout of `_more_workers` that fits, with `levers` and any knob it still needs."""
    return next((found for base in _more_workers(cfg, pools)
                 if (found := _fit_knobs(cfg, {**levers, **base})) is not None), None)


def _more_workers(cfg: RLConfig, pools: set[str]) -> Iterator[dict[str, Any]]:
    """Layouts with more workers, fewest first: world sizes that split a mini-batch evenly, replicas
    before FSDP2, the micro-batch cut to divide each worker's new share. Only the actor pool and a
    critic pool scale so: each reward-model worker holds the whole (inference-only) model."""

    arr, tr, c = cfg.actor_rollout_ref, cfg.trainer, cfg.critic
    if "actor" in pools:
        world, mini = tr.n_gpus_per_node * tr.nnodes, arr.actor.ppo_mini_batch_size * arr.rollout.n
        shard = {} if arr.actor.strategy in SHARDED else {"actor_rollout_ref.actor.strategy": "fsdp2"}
        with_critic = needs_critic(cfg) and critic_pool_workers(cfg) is None and c.strategy not in SHARDED
        strategies = [{}, shard] + ([{**shard, "critic.strategy": "fsdp2"}] if with_critic else [])
        backend = {"trainer.backend": "ray"} if tr.backend == "local" else {}
        for w in (w for w in range(world + 1, mini + 1) if mini % w == 0):
            micro = _micro_for("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                               arr.actor.ppo_micro_batch_size_per_gpu, mini // w)
            layouts = [{"trainer.n_gpus_per_node": w // tr.nnodes}] * (w % tr.nnodes == 0) + \
                      [{"trainer.nnodes": w // tr.n_gpus_per_node}] * (w % tr.n_gpus_per_node == 0)
            yield from ({**backend, **layout, **strategy, **micro} for layout in layouts for strategy in strategies)
    elif "critic" in pools and (workers := critic_pool_workers(cfg)) is not None:
        mini = (c.ppo_mini_batch_size or arr.actor.ppo_mini_batch_size) * arr.rollout.n
        strategies = [{}] + ([] if c.strategy in SHARDED else [{"critic.strategy": "fsdp2"}])
        for w in (w for w in range(workers + 1, mini + 1) if mini % w == 0):
            micro = _micro_for("critic.ppo_micro_batch_size_per_gpu",
                               c.ppo_micro_batch_size_per_gpu or arr.actor.ppo_micro_batch_size_per_gpu, mini // w)
            # the keys the user sized the pool with: per node (w nodes' worth when it divides), or n_workers
            layouts = ([{"critic.n_gpus_per_node": w // c.nnodes}] * (w % c.nnodes == 0) if c.enable_resource_pool
                       else [{"critic.n_workers": w}])
            yield from ({**layout, **strategy, **micro} for layout in layouts for strategy in strategies)


def _levers_on(cfg: RLConfig) -> list[str]:
    """The policy's memory levers this config already uses, named with their keys."""
    arr = cfg.actor_rollout_ref
    m, a = arr.model, arr.actor
    precision = f"{ACTOR}.fsdp_config.mixed_precision.param_dtype"
    on = [(m.enable_gradient_checkpointing, f"{MODEL}.enable_gradient_checkpointing", "true"),
          (m.use_remove_padding, f"{MODEL}.use_remove_padding", "true"),
          (dtype_name("", a.fsdp_config.mixed_precision.param_dtype) == "bf16", precision, "bf16"),
          (dtype_name("", arr.ref.fsdp_config.model_dtype) == "bf16", "actor_rollout_ref.ref.fsdp_config.model_dtype",
           "bf16"),
          (a.use_dynamic_bsz, f"{ACTOR}.use_dynamic_bsz", f"true, ppo_max_token_len_per_gpu={a.ppo_max_token_len_per_gpu}")]
    return [f"{LEVERS[key]} ({key}={value})" for used, key, value in on if used]


def _describe_fix(fix: dict[str, Any]) -> str:
    """`key=value ...`, led by what the levers among them are."""
    names = list(dict.fromkeys(LEVERS[k] for k in fix if k in LEVERS))
    keys = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fix.items())
    return f"{' + '.join(names)}: {keys}" if names else keys


def refusal(cfg: RLConfig, over: list[PoolMemory], fixes: list[dict[str, Any]]) -> str:
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
    on = _levers_on(cfg)
    counted = f" (counted with the memory levers already on: {', '.join(on)})" if on else ""
    if fixes:
        fix = "it fits with " + "; or with ".join(_describe_fix(f) for f in fixes)
    else:
        fix = ("no memory lever (activation checkpointing, packing, bf16, token budgets), micro-batch size or worker "
               "count fits; use a smaller model, shorter data.max_prompt_length + data.max_response_length, or "
               "workers with more memory")
    return (f"{'; '.join(reasons)}{counted}; {fix}; or, if a worker has more memory than that, set "
            "trainer.memory_per_worker_gb to it in GiB (the estimate is approximate; `hybridrl plan` shows its parts)")


def check_memory(cfg: RLConfig, plan: BatchPlan) -> MemoryReport:
    """The estimate, or MemoryBudgetError naming the pool, phase and keys, with settings that fit."""
    report = estimate_memory(cfg, plan)
    over = [p for p in report.pools if p.peak_bytes > p.budget]
    if over:
        fixes = propose_fixes(cfg, over)
        raise MemoryBudgetError(refusal(cfg, over, fixes), fixes)
    return report
