"""The `config` check: the config as `hybridrl train` takes it (every problem at once, the world size's
arithmetic included), the legal-but-likely-unintended settings train warns about, and the keys set away from
their defaults that this config never reads (plan/inert_keys.py)."""

from __future__ import annotations

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import check
from hybridrl.check.result import Result, failed, passed
from hybridrl.plan.inert_keys import DROPPED, NOTE, InertKey, inert_keys
from hybridrl.plan.levers import zero_advantage_note
from hybridrl.config.validate import key_warnings
from hybridrl.vocab.verl_defaults import given_keys, unset_keys_with_other_defaults


@check("config")
def config(ctx: CheckContext) -> Result:
    """The config is one `hybridrl train` accepts: plan's validation finds no problem (all of them are listed at
    once, each naming its key), and no key is set to a value that this config silently ignores (a KL coefficient
    with the KL term off, a tool file with multi-turn off); keys with no effect here, train's warnings, and the
    keys left unset whose hybridrl default is not verl's (vocab/verl_defaults.py) are listed."""
    inert = [k for k in inert_keys(_as_given(ctx)) if not _named_in(k.key, ctx.config_errors)]
    dropped = [k for k in inert if k.level == DROPPED]
    others = _detail_lines(ctx, [k for k in inert if k.level != DROPPED])
    if ctx.config_errors:
        n = len(ctx.config_errors)
        return failed(f"{n} problem{'s' * (n > 1)}: `hybridrl train` refuses this config", *ctx.config_errors,
                      *[k.line() for k in dropped], *others,
                      fix="change the keys each line names (" + _dropped_fix(dropped) + ")" if dropped else
                      "change the keys each line names; every problem is listed")
    if dropped:
        return failed("; ".join(f"{k.key} is set but has no effect" for k in dropped),
                      *[k.line() for k in dropped], *others, fix=_dropped_fix(dropped))
    return passed(_plan_summary(ctx), *others)


def _as_given(ctx: CheckContext):
    """The user's config before the micro-batch sizes are derived into it (derived values are not the user's):
    only its `auto` precision keys resolved, as every config is judged (plan/resolve.py fill_precision)."""
    from hybridrl.config.loader import load_config_checked
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import fill_precision

    cfg = load_config_checked(RLConfig, ctx.config_file, ctx.overrides).config
    fill_precision(cfg)
    return cfg


def _named_in(key: str, errors: list[str]) -> bool:
    """A key a config error already names (validation refuses e.g. critic.n_workers without a critic)."""
    return any(key in e for e in errors)


def _dropped_fix(dropped: list[InertKey]) -> str:
    return "; ".join(f"set {k.fix} for {k.key} to count, or remove it" for k in dropped)


def _detail_lines(ctx: CheckContext, inert: list[InertKey]) -> list[str]:
    """train's warnings, then the keys with no effect, then the accepted no-ops (notes)."""
    lines = [f"warning: {w}" for w in key_warnings(ctx.cfg)]  # the inert keys are listed below, by level
    lines += [f"unused: {k.line()}" for k in inert if k.level != NOTE]
    lines += [f"note: {k.line()}" for k in inert if k.level == NOTE]
    note = zero_advantage_note(ctx.cfg) if ctx.plan is not None else None
    lines += [f"note: {note}"] if note else []
    # a verl command leaving these unset counts on verl's value (e.g. an lr of 1e-6 where hybridrl's default is 2e-4)
    gaps = unset_keys_with_other_defaults(ctx.cfg, given_keys(ctx.overrides, ctx.config_file))
    return lines + [f"not verl's default: {g.line()}" for g in gaps]


def _plan_summary(ctx: CheckContext) -> str:
    p = ctx.plan
    return (f"trains as given: {p.prompts_per_step} prompts x {p.n} = {p.responses_per_step} responses per step, "
            f"{p.optimizer_steps_per_step} optimizer step(s) of {p.grad_accum_steps} micro-batch(es) of "
            f"{p.micro_batch_responses_per_worker} on each of {p.world_size} worker(s)")
