"""Build a typed config from defaults, an optional YAML file and dotted overrides.

Order: dataclass defaults < YAML file < `key=value` overrides (Hydra's `+key=value` and
`++key=value` too). Every key is checked against the dataclass tree first: a verl key the
schema lacks gets its own answer from vocab/verl_keys.py (accepted, or refused saying why), as do
Hydra's `defaults:` and `hydra:` (vocab/hydra_keys.py), TRL's names (vocab/trl_keys.py: `beta`
is the KL coefficient) and tutorials' words (vocab/tutorial_keys.py: `actor_lr`); any other unknown key is an error naming the valid keys it plausibly stands
for (vocab/suggest.py), or saying that none does; every value is
type-checked by OmegaConf, re-worded as one line naming the key and the expected type; `${...}`
references are resolved, a broken one named with its key; and every value is checked against the
range or choices its field declares (config/constraints.py). All these problems of one command are
reported together (errors.ConfigErrors).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from dataclasses import dataclass
from typing import Any, Generic, Mapping, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridrl.config.constraints import check_constraints
from hybridrl.vocab.hydra_keys import SECTION as HYDRA_SECTION
from hybridrl.vocab.hydra_keys import judge as judge_hydra_key
from hybridrl.config.schema import RLConfig
from hybridrl.vocab.suggest import did_you_mean, suggestions
from hybridrl.vocab.trl_keys import answer as trl_answer
from hybridrl.vocab.tutorial_keys import answer as tutorial_answer
from hybridrl.vocab.verl_keys import judge as judge_verl_key
from hybridrl.errors import ConfigError, raise_all

C = TypeVar("C")


@dataclass
class LoadedConfig(Generic[C]):
    """A config with every refused value left at its default, and what was refused."""

    config: C
    errors: list[str]  # one line each: unknown keys, wrong types, broken interpolations, values out of range
    refused: set[str]  # the dotted keys those errors are about (and the keys suggested for unknown ones)


def load_config(cls: type[C], config_file: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                values: Mapping[str, Any] | None = None) -> C:
    """Return an instance of dataclass `cls` with the YAML file, `values` and overrides applied; every problem
    of the keys and values at once as ConfigErrors (one problem: its message alone)."""
    loaded = load_config_checked(cls, config_file, overrides, values)
    raise_all(loaded.errors)
    return loaded.config


def load_config_checked(cls: type[C], config_file: str | None = None,
                        overrides: list[str] | tuple[str, ...] = (),
                        values: Mapping[str, Any] | None = None) -> LoadedConfig[C]:
    """Like load_config, but the problems are returned with the config instead of raised, so that a
    caller can add the checks that tie keys together (config/validate.py, plan/checks.py: plan/resolve.py does) to the same report.

    `values`: a mapping of keys (nested, or dotted like `data.seed`) from Python (hybridrl.train), a layer
    between the YAML file and the overrides, checked exactly as they are."""
    errors: list[str] = []
    refused: set[str] = set()
    layers = [(_parse_overrides(overrides, errors), "command line")]
    if values is not None:
        layers.insert(0, (_from_mapping(values), VALUES_SOURCE))
    if config_file is not None:
        layers.insert(0, (_load_yaml(config_file), f"--config {config_file}"))
    merged = OmegaConf.structured(cls)
    for layer, source in layers:  # one layer at a time, so a type error names where the value came from
        merged = _merge(cls, merged, _checked(cls, layer, source, errors, refused), source, errors, refused)
    config = _to_object(cls, merged, errors, refused)
    keys = valid_keys(cls)
    out_of_range = check_constraints(config, keys, refused, {k for k in keys if _nullable(field_type(cls, k))})
    errors += out_of_range.values()
    for key in out_of_range:  # later checks see the default, not a value already refused
        _set(config, key, _get(_defaults(cls), key))
    return LoadedConfig(config, errors, refused | set(out_of_range))


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)


def _set(obj: Any, dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for part in path:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def _merge(cls: type, merged: DictConfig, layer: DictConfig, source: str, errors: list[str], refused: set[str]):
    """merged <- layer; a value of the wrong type is reported and its key keeps its earlier value."""
    try:
        return OmegaConf.merge(merged, layer)
    except OmegaConfBaseException:
        pass
    free = _free_keys(cls)
    for dotted, value in _leaves(layer, free=free):  # key by key, to report every wrong value
        one = OmegaConf.create()
        OmegaConf.update(one, dotted, value, merge=False)
        try:
            merged = OmegaConf.merge(merged, one)
        except OmegaConfBaseException as e:
            errors.append(f"{source}: {_type_error_message(cls, e)}")
            refused.add(dotted)
    return merged


def _to_object(cls: type[C], merged: DictConfig, errors: list[str], refused: set[str]) -> C:
    """The dataclass instance; a `${...}` that cannot be resolved is reported with its key, which
    then keeps its default."""
    for _ in range(len(valid_keys(cls)) + 1):  # each round reports (and resets) one broken key
        try:
            return OmegaConf.to_object(merged)  # type: ignore[return-value]
        except OmegaConfBaseException as e:
            key = (e.full_key or "").split("[")[0]
            if key not in valid_keys(cls) or key in refused:
                raise ConfigError(f"invalid config: {str(e.msg).splitlines()[0]}") from None
            raw = OmegaConf.to_container(merged, resolve=False)
            errors.append(_interpolation_message(key, _get(raw, key), e))
            refused.add(key)
            OmegaConf.update(merged, key, _get(_defaults(cls), key), merge=False)
    raise ConfigError("invalid config: interpolations could not be resolved")


def _defaults(cls: type) -> dict:
    """The dataclass tree's default values, unresolved (`${...}` kept as text)."""
    return OmegaConf.to_container(OmegaConf.structured(cls), resolve=False)  # type: ignore[return-value]


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def _interpolation_message(key: str, raw: Any, e: OmegaConfBaseException) -> str:
    """One line for a `${...}` value that cannot be resolved: the key, its text and why."""
    reason = str(e.msg).splitlines()[0]
    missing = re.match(r"Interpolation key '(.+)' not found", reason)
    if missing:
        return (f"{key}={raw!r}: ${{{missing.group(1)}}} refers to no config key; write ${{section.key}} with a key "
                "`--help` lists (e.g. ${trainer.experiment_name})")
    return f"{key}={raw!r}: cannot resolve the interpolation ({reason})"


@functools.lru_cache(maxsize=None)
def valid_keys(cls: type) -> dict[str, dataclasses.Field]:
    """Every leaf key of the dataclass tree, dotted (`actor_rollout_ref.actor.clip_ratio`). Cached: do
    not modify the dict."""
    keys: dict[str, dataclasses.Field] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys.update({f"{f.name}.{k}": v for k, v in valid_keys(hints[f.name]).items()})
        else:
            keys[f.name] = f
    return keys


@functools.lru_cache(maxsize=None)
def field_type(cls: type, dotted: str) -> Any:
    """The annotated type of a dotted key (`Optional[int]`, `list[str]` ...)."""
    *parents, leaf = dotted.split(".")
    for name in parents:
        cls = typing.get_type_hints(cls)[name]
    return typing.get_type_hints(cls)[leaf]


def type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Union and type(None) in args:
        return f"{type_name(next(a for a in args if a is not type(None)))} or null"
    if origin is list:
        return "a list of " + {int: "integers", float: "numbers", bool: "booleans", str: "strings"}.get(args[0], str(args[0]))
    if tp is dict or origin is dict:
        return "a mapping, e.g. {key: value}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _load_yaml(path: str) -> DictConfig:
    from hybridrl.config.yaml_load import load_file

    loaded = load_file(path, f"--config {path}")
    loaded = {} if loaded is None else loaded  # an empty file sets nothing
    if not isinstance(loaded, dict):
        raise ConfigError(f"--config {path}: expected a mapping of keys at the top level, got {type(loaded).__name__}")
    try:
        return OmegaConf.create(loaded)
    except OmegaConfBaseException as e:  # e.g. a YAML date or a set, which no config key holds
        raise ConfigError(f"--config {path}: {str(e.msg).splitlines()[0]}") from None


VALUES_SOURCE = "config"  # how errors name the `values` layer (a dict given to hybridrl.train)


def _from_mapping(values: Mapping[str, Any]) -> DictConfig:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{VALUES_SOURCE}: expected a mapping of config keys, got {type(values).__name__}")
    try:
        return OmegaConf.create(dict(values))
    except OmegaConfBaseException as e:  # a value no config key can hold (an object, a set)
        raise ConfigError(f"{VALUES_SOURCE}: {str(e.msg).splitlines()[0]}") from None


def _parse_overrides(overrides: list[str] | tuple[str, ...], errors: list[str]) -> DictConfig:
    """The overrides as one mapping (later ones win); a malformed one is reported and left out.
    Hydra's `+key=value` (add) and `++key=value` (add or override) are `key=value` here, since every
    key already exists with its default."""
    out = OmegaConf.create()
    for item in overrides:
        if item.startswith("~"):
            errors.append(f"override {item!r}: Hydra's ~ deletes a key from verl's config, but hybridrl's keys "
                          "are typed fields that always exist; leave the override out to keep the default "
                          f"(`hybridrl train --help` shows it), or set {item[1:].partition('=')[0]}=<value>")
            continue
        item = item[2:] if item.startswith("++") else item[1:] if item.startswith("+") else item
        key, sep, _ = item.partition("=")
        if not sep or not key or key.startswith(("-", "+")):
            errors.append(f"override {item!r} must look like key=value (for example data.train_batch_size=32)")
            continue
        try:
            out = OmegaConf.merge(out, OmegaConf.from_dotlist([item]))
        except Exception as e:  # OmegaConf and YAML parser errors alike, e.g. `key=[a, b`
            errors.append(f"cannot parse overrides: {item!r} ({str(e).splitlines()[0]})")
    return out


@functools.lru_cache(maxsize=None)
def _free_keys(cls: type) -> frozenset[str]:
    """dict-typed passthrough keys (engine_kwargs.vllm): one leaf holding a whole mapping."""
    return frozenset(k for k in valid_keys(cls) if field_type(cls, k) is dict or typing.get_origin(field_type(cls, k)) is dict)


def _checked(cls: type, cfg: DictConfig, source: str, errors: list[str], refused: set[str]) -> DictConfig:
    """A copy of cfg with dotted keys expanded (`data.seed: 1` in YAML) and scalars given for list
    keys wrapped in a list; an unknown key is reported (see _unknown_key_problem) and left out."""
    keys = valid_keys(cls)
    out = OmegaConf.create()
    for dotted, value in _leaves(cfg, free=_free_keys(cls) | {HYDRA_SECTION}):  # `hydra:` answered once, whole
        if dotted not in keys:
            problem = _unknown_key_problem(cls, dotted, value, keys)
            if problem is None:  # a verl key accepted with the one behaviour hybridrl has: nothing reads it
                continue
            errors.append(f"{source}: {problem}")
            # the keys a "did you mean" proposes: the cross-key checks would only report their defaults
            refused.update([dotted, *suggestions(dotted, list(keys))])
            continue
        if value == "???":  # OmegaConf's "missing" marker: a merge would silently keep the old value
            errors.append(f"{source}: {dotted}=??? leaves the key without a value; give one (or remove it)")
            refused.add(dotted)
            continue
        if typing.get_origin(field_type(cls, dotted)) is list and not isinstance(value, (list, ListConfig)):
            value = [value]  # verl accepts `train_files=x.parquet`
        OmegaConf.update(out, dotted, value, merge=False)
    return out


def _leaves(cfg: DictConfig, prefix: str = "", free: set[str] = frozenset()) -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf; a `free` key (a dict-typed passthrough such as
    engine_kwargs.vllm) is one leaf holding its whole mapping."""
    out = []
    for key in cfg.keys():
        dotted = f"{prefix}{key}"
        node = cfg._get_node(key)
        if dotted in free:
            out.append((dotted, OmegaConf.to_container(node) if isinstance(node, DictConfig) else node._value()))
        elif isinstance(node, DictConfig):
            out.extend(_leaves(node, dotted + ".", free))
        else:
            out.append((dotted, OmegaConf.to_container(node) if isinstance(node, ListConfig) else node._value()))
    return out


def _unknown_key_problem(cls: type, dotted: str, value: Any, keys: dict[str, dataclasses.Field]) -> str | None:
    """Why a key the schema lacks is refused, or None when it is a verl (or Hydra) key accepted with
    this value. The tables of names from elsewhere (verl's, TRL's, tutorials') come before the "did you mean",
    whose spelling likeness would point the wrong way for them (TRL's `beta` looks like critic.optim.betas)."""
    group = next((k for k in keys if k.startswith(dotted + ".")), None)
    if group is not None:
        return f"{dotted!r} is a group of keys, not a value; set e.g. {group}=..."
    verdict = judge_hydra_key(dotted, value)
    if verdict is None and cls is RLConfig:  # the verl and TRL tables name RL keys
        verdict = judge_verl_key(dotted, value)
    if verdict is not None:
        return None if verdict.accepted else verdict.message
    known = (trl_answer(dotted, value) or tutorial_answer(dotted, value)) if cls is RLConfig else None
    return known or f"unknown key {dotted!r}; {did_you_mean(dotted, list(keys))}"


def _type_error_message(cls: type, e: OmegaConfBaseException) -> str:
    key = (e.full_key or "").split("[")[0]
    value = getattr(e, "value", None)
    try:
        expected = type_name(field_type(cls, key))
    except (KeyError, AttributeError, TypeError):
        return f"invalid config: {str(e.msg).splitlines()[0]}"
    if value is None:
        return f"{key} is empty or null: expected {expected}"
    return f"{key}={value!r} is not valid: expected {expected}"
