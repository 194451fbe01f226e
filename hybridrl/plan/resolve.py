"""The one place a loaded config gets values filled in, and the run it describes.

`resolve(cfg)` does, in this order, what the run builder, the Ray workers and `hybridrl plan` then read:
1. the `auto` precision keys -> this machine's dtypes (plan/precision_auto.py);
2. the keys the user set that the config never reads are judged, as given (plan/inert_keys.py: the values filled
   in below are not the user's);
3. trainer.backend=auto -> local | ray (plan/levers.py resolve_backend);
4. every cross-key check (plan/checks.py), all problems at once (errors.ConfigErrors);
5. the micro-batch sizes left null -> derived, and lowered to fit the memory estimate (plan/derive.py).
The values are written into the config itself, so that every role, local or Ray, reads the same numbers; the
RunPlan holds that config with the batch plan and the notes saying what was filled in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import Problems, key_warnings
from hybridrl.errors import ConfigError, messages_of, raise_all
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.plan.checks import check_rl_config, uses_reference_pass
from hybridrl.plan.derive import derive_micro_batches
from hybridrl.plan.inert_keys import InertKey, inert_keys
from hybridrl.plan.levers import resolve_backend
from hybridrl.plan.precision_auto import Machine, resolve_auto_precision
from hybridrl.plan.roles import needs_critic, needs_reference, needs_teacher

# the attributes a resolved config carries, so that resolving it again (or config_warnings) sees the first
# resolution's facts: the `auto` precision notes, and the inert keys of the config as it was given
AUTO_NOTES = "auto_notes"
GIVEN_INERT = "given_inert_keys"


@dataclass(frozen=True)
class RunPlan:
    """What a run does, resolved from its config once (module doc)."""

    config: RLConfig  # every derived value filled in: precision, trainer.backend, the micro-batch sizes
    batch: BatchPlan  # the policy's batch plan; `derived` names each value filled in, and why
    precision: tuple[str, ...]  # `key=value (auto: why)`, one per `auto` precision key resolved
    inert: tuple[InertKey, ...]  # keys set away from their defaults that this config never reads (as given)

    @property
    def uses_critic(self) -> bool:
        return needs_critic(self.config)

    @property
    def uses_reference(self) -> bool:
        return needs_reference(self.config)

    @property
    def uses_teacher(self) -> bool:
        return needs_teacher(self.config)

    def warnings(self) -> list[str]:
        """Legal but probably unintended settings, one line each (config_warnings, with this plan's inert keys:
        judged on the config as given, before resolve filled values into it)."""
        return _warnings(self.config, self.inert)

    def placement(self) -> str:
        """The placement lines of `hybridrl plan` (plan/placement.py)."""
        from hybridrl.plan.placement import describe_placement

        return describe_placement(self.config)


def resolve(cfg: RLConfig, machine: Optional[Machine] = None) -> RunPlan:
    """Fill in `cfg`'s derived values (in place, module doc) and return its RunPlan; every problem at once as
    ConfigErrors. `machine`: what `auto` precision computes in on a device (default: this machine)."""
    problems = Problems()
    plan = _resolve_into(cfg, problems, machine)
    raise_all(problems.errors)
    assert plan is not None  # no problem: the plan was made
    return _run_plan(cfg, plan)


def fill_precision(cfg: RLConfig, machine: Optional[Machine] = None) -> tuple[str, ...]:
    """Step 1 alone: the `auto` precision keys resolved in place (once per config), and their notes. A config as
    the user gave it (`hybridrl check`'s unused-key check) is judged with these resolved and nothing else."""
    if not hasattr(cfg, AUTO_NOTES):
        setattr(cfg, AUTO_NOTES, tuple(resolve_auto_precision(cfg, machine)))
    return getattr(cfg, AUTO_NOTES)


def _resolve_into(cfg: RLConfig, problems: Problems, machine: Optional[Machine] = None) -> Optional[BatchPlan]:
    """Steps 1-5, recording problems; the batch plan when the checks passed and the sizes could be derived."""
    try:
        fill_precision(cfg, machine)
    except ConfigError as e:  # HYBRIDRL_AUTO_DTYPE set to a value it does not take
        problems.errors.extend(messages_of(e))
        return None
    if not hasattr(cfg, GIVEN_INERT):  # the keys as the user set them, before anything is filled in below
        setattr(cfg, GIVEN_INERT, tuple(inert_keys(cfg)))
    resolve_backend(cfg)  # auto -> local | ray, before anything reads it
    if not check_rl_config(cfg, problems):
        return None
    try:
        return derive_micro_batches(cfg, needs_critic(cfg), uses_reference_pass(cfg), getattr(cfg, AUTO_NOTES))
    except ConfigError as e:
        problems.errors.extend(messages_of(e))
        return None


def _run_plan(cfg: RLConfig, plan: BatchPlan) -> RunPlan:
    return RunPlan(cfg, plan, tuple(getattr(cfg, AUTO_NOTES)), tuple(getattr(cfg, GIVEN_INERT)))


def validate_rl_config(cfg: RLConfig) -> BatchPlan:
    """resolve(cfg)'s batch plan: every problem of the rules that tie keys together, at once (ConfigErrors); else
    the derived values filled into `cfg` in place."""
    return resolve(cfg).batch


def load_run_plan(config_file: Optional[str], overrides: list[str] | tuple[str, ...],
                  values: Optional[Mapping[str, Any]] = None) -> RunPlan:
    """Load a config (YAML file, then `values` from Python, then the overrides) and resolve it, with one report:
    the unknown keys, wrong types and values out of range, and with them the cross-key problems that do not
    involve a refused key (those keys hold their defaults while checking, so a problem that names one may be an
    artefact of that)."""
    cfg, errors, plan = load_rl_config_checked(config_file, overrides, values)
    raise_all(errors)
    assert plan is not None
    return _run_plan(cfg, plan)


def load_rl_config(config_file: Optional[str], overrides: list[str] | tuple[str, ...],
                   values: Optional[Mapping[str, Any]] = None) -> tuple[RLConfig, BatchPlan]:
    """load_run_plan's config and batch plan. `values`: keys given from Python (hybridrl.train), between the
    file and the overrides."""
    run = load_run_plan(config_file, overrides, values)
    return run.config, run.batch


def load_rl_config_checked(config_file: Optional[str], overrides: list[str] | tuple[str, ...],
                           values: Optional[Mapping[str, Any]] = None
                           ) -> tuple[RLConfig, list[str], Optional[BatchPlan]]:
    """load_rl_config's config, problems and plan, returned instead of raised (`hybridrl check` reports them as
    one of its lines); the plan is None when the batch sizes do not make one."""
    from hybridrl.config.loader import load_config_checked

    loaded = load_config_checked(RLConfig, config_file, overrides, values)
    problems = Problems()
    plan = _resolve_into(loaded.config, problems)
    errors = loaded.errors + [m for m in problems.errors if not _mentions(m, loaded.refused)]
    return loaded.config, list(dict.fromkeys(errors)), plan


def _mentions(message: str, keys: set[str]) -> bool:
    """Does the message name one of the keys (in full, or by its last two parts, e.g. rollout.n)?"""
    return any(k in message or ".".join(k.split(".")[-2:]) in message for k in keys)


def config_warnings(cfg: RLConfig) -> list[str]:
    """Legal but probably unintended settings, logged at start-up, one line each: the combinations of keys
    (key_warnings), then every key set away from its default that this config never reads, and why
    (plan/inert_keys.py; judged on the config as given, before resolve filled values into it)."""
    inert = getattr(cfg, GIVEN_INERT, None)
    return _warnings(cfg, inert_keys(cfg) if inert is None else inert)


def _warnings(cfg: RLConfig, inert) -> list[str]:
    return key_warnings(cfg) + [_inert_line(k) for k in inert]


def _inert_line(k: InertKey) -> str:
    return k.line() + (f"; set {k.fix} for it to count, or remove it" if k.fix else "")

