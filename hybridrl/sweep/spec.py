"""The sweep file (YAML), read and checked whole: every problem is reported at once, each naming its key and
the fix (errors.ConfigErrors), before Ray starts.

    base:                       # the config every trial starts from
      config: rl.yaml           # optional: a config YAML (path as on the command line)
      overrides:                # optional: verl dotted keys, a list of key=value or a mapping
        trainer.total_training_steps: 20
    space:                      # config key -> one search-space entry (sweep/space.py)
      actor_rollout_ref.actor.optim.lr: {loguniform: [1.0e-6, 1.0e-4]}
    metric: val-core/arithmetic/reward/mean@1
    mode: max                   # max | min
    num_samples: 8              # trials (search=grid/random: passes over the grid entries)
    search: random              # random | grid | tpe (Optuna's TPE, when optuna is installed)
    scheduler: asha             # none | asha | median, or {name: asha, grace_period: 2, reduction_factor: 2}
    output: sweeps/lr           # the sweep folder: one run folder per trial inside
    seed: 0                     # optional: the search's seed
    max_concurrent: 2           # optional: at most this many trials at once (below what the machine allows, e.g.
                                #   to leave cores to other work); the machine's bound is derived (sweep/resources.py)
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from hybridrl.errors import ConfigError, raise_all
from hybridrl.sweep.keys import unknown_keys
from hybridrl.sweep.space import Entry, is_number, parse_entry, space_problems

KEYS = ("base", "space", "metric", "mode", "num_samples", "search", "scheduler", "output", "seed", "max_concurrent")
SEARCHES = ("random", "grid", "tpe")
SWEEP_FILE = "sweep.yaml"  # in the sweep folder: the file as run (driver.py writes it; compare reads it)
# scheduler -> its parameters -> (is the value valid, what to give); the step counts are hybridrl steps
_STEPS = (lambda v: _is_int(v) and v >= 1, "an integer >= 1 (hybridrl steps)")
SCHEDULERS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "none": {},
    "asha": {"grace_period": _STEPS, "reduction_factor": (lambda v: is_number(v) and v > 1, "a number > 1"),
             "max_t": _STEPS},
    "median": {"grace_period": (lambda v: _is_int(v) and v >= 0, "an integer >= 0 (hybridrl steps)"),
               "min_samples_required": (lambda v: _is_int(v) and v >= 1, "an integer >= 1 (trials)")},
}
# set by the sweep for every trial: a run folder of its own, resumed in place when the sweep is resumed
SWEEP_SET = ("trainer.default_local_dir", "trainer.resume_mode")


@dataclass(frozen=True)
class Base:
    """The config every trial starts from: a YAML file and overrides (a key=value list or a mapping)."""

    config: Optional[str] = None
    overrides: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)

    def keys(self) -> set[str]:
        return set(self.values) | {o.split("=", 1)[0].lstrip("+") for o in self.overrides}


@dataclass(frozen=True)
class Scheduler:
    name: str  # one of SCHEDULERS
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepSpec:
    base: Base
    space: list[Entry]
    metric: str
    mode: str
    num_samples: int
    search: str
    scheduler: Scheduler
    output: str
    seed: int = 0
    max_concurrent: Optional[int] = None
    source: dict[str, Any] = field(default_factory=dict)  # the file as read, written into the sweep folder


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_yaml(path: str) -> Any:
    from hybridrl.config.yaml_load import load_file

    return load_file(path, path, "give the sweep's YAML file (docs/sweep.md); the same command with the same file "
                     "resumes a sweep, and `hybridrl compare SWEEP_DIR` lists a sweep folder's trials")


def load_sweep(path: str) -> SweepSpec:
    """The sweep file at `path`, checked whole, its swept keys against the config schema (sweep/check.py then
    checks the base config)."""
    raw = read_yaml(path)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: a sweep file is a mapping of {', '.join(KEYS)}; got {type(raw).__name__}")
    return parse_sweep(raw)


def parse_sweep(raw: Mapping[str, Any]) -> SweepSpec:
    """A SweepSpec from the file's mapping; a ConfigErrors with one line per problem."""
    errors = [f"{key}: not a sweep key; valid keys: {', '.join(KEYS)}" for key in raw if key not in KEYS]
    errors += [f"{key}: missing; {hint}" for key, hint in (
        ("space", "give a mapping of config key -> {grid|choice|uniform|loguniform|randint: ...}"),
        ("metric", "give the metric to optimise, e.g. val-core/arithmetic/reward/mean@1"),
        ("mode", "give max or min"), ("output", "give the sweep folder, e.g. sweeps/lr")) if key not in raw]
    base = _base(raw.get("base"), errors)
    space = _space(raw.get("space", {}), errors)
    search = _choice(raw, "search", "random", SEARCHES, errors)
    if search == "tpe" and importlib.util.find_spec("optuna") is None:
        errors.append("search=tpe needs Optuna, which is not installed; pip install 'hybridrl[tpe]', or use "
                      "search=random")
    errors += space_problems(space, search)
    errors += [f"space.{e.key}: the sweep sets it for every trial (each trial's own run folder, resumed in place); "
               "remove it from the space" for e in space if e.key in SWEEP_SET]
    errors += [f"base.overrides: {key} is set by the sweep for every trial; remove it" for key in base.keys()
               if key in SWEEP_SET]
    errors += [f"space.{e.key}: also set in base.overrides; give it in one place" for e in space
               if e.key in base.keys()]
    if space and not any(m.startswith("base") for m in errors):  # the loader needs a readable base
        errors += unknown_keys(base.config, base.overrides, base.values, space)
    spec = SweepSpec(base=base, space=space, metric=_string(raw, "metric", errors), mode=_choice(raw, "mode", "max",
                     ("max", "min"), errors), num_samples=_int(raw, "num_samples", 1, 1, errors), search=search,
                     scheduler=_scheduler(raw.get("scheduler", "none"), errors), output=_string(raw, "output", errors),
                     seed=_int(raw, "seed", 0, 0, errors), source=dict(raw),
                     max_concurrent=_int(raw, "max_concurrent", None, 1, errors) if "max_concurrent" in raw else None)
    raise_all(errors)
    return spec


def _base(raw: Any, errors: list[str]) -> Base:
    if raw is None:
        return Base()
    if isinstance(raw, str):
        return Base(config=raw)
    if not isinstance(raw, Mapping) or set(raw) - {"config", "overrides"}:
        errors.append("base: give {config: FILE.yaml, overrides: [key=value, ...] or {key: value}} (either part "
                      f"optional), or a config file's path; got {raw!r}")
        return Base()
    config, overrides = raw.get("config"), raw.get("overrides") or []
    if config is not None and not (isinstance(config, str) and os.path.isfile(config)):
        errors.append(f"base.config={config!r}: file not found; give a config YAML (relative to where you run "
                      "hybridrl)")
        config = None
    if isinstance(overrides, Mapping):
        return Base(config, values=dict(overrides))
    if isinstance(overrides, list) and all(isinstance(o, str) and "=" in o for o in overrides):
        return Base(config, overrides=list(overrides))
    errors.append(f"base.overrides: got {overrides!r}; give a list of key=value strings or a mapping of keys")
    return Base(config)


def _space(raw: Any, errors: list[str]) -> list[Entry]:
    if not isinstance(raw, Mapping) or not raw:
        errors.append(f"space: got {raw!r}; give a mapping of at least one config key -> search-space entry")
        return []
    entries = []
    for key, value in raw.items():
        entry, problem = parse_entry(str(key), value)
        if problem:
            errors.append(problem)
        else:
            entries.append(entry)
    return entries


def _string(raw: Mapping, key: str, errors: list[str]) -> str:
    value = raw.get(key)
    if key in raw and not (isinstance(value, str) and value):
        errors.append(f"{key}: got {value!r}; give a non-empty string")
    return value if isinstance(value, str) else ""


def _choice(raw: Mapping, key: str, default: str, choices: tuple[str, ...], errors: list[str]) -> str:
    value = raw.get(key, default)
    if value not in choices:
        errors.append(f"{key}={value!r}: not supported; valid values: {', '.join(choices)}")
        return default
    return value


def _int(raw: Mapping, key: str, default: int, lowest: int, errors: list[str]) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        errors.append(f"{key}={value!r}: give an integer >= {lowest}")
        return default
    return value


def _scheduler(raw: Any, errors: list[str]) -> Scheduler:
    """`none|asha|median`, or a mapping with `name` and that scheduler's parameters (SCHEDULERS)."""
    params = dict(raw) if isinstance(raw, Mapping) else {}
    name = params.pop("name", None) if isinstance(raw, Mapping) else raw
    if name not in SCHEDULERS:
        errors.append(f"scheduler: got {raw!r}; give one of {', '.join(SCHEDULERS)}, or a mapping with name: and its "
                      "parameters")
        return Scheduler("none")
    allowed = SCHEDULERS[name]
    for key, value in params.items():
        if key not in allowed:
            errors.append(f"scheduler.{key}: not a parameter of {name}; valid: {', '.join(allowed) or 'none'}")
            continue
        valid, what = allowed[key]
        if not valid(value):
            errors.append(f"scheduler.{key}={value!r}: give {what}")
    return Scheduler(name, params)
