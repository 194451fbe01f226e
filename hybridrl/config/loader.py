"""Build a typed config from defaults, an optional YAML file and dotted overrides.

Order: dataclass defaults < YAML file < `key=value` overrides. Every key is checked
against the dataclass tree first, so a typo is an error naming the closest valid key,
and every value is type-checked by OmegaConf, re-worded as one line naming the key and
the expected type.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridrl.errors import ConfigError

C = TypeVar("C")


def load_config(cls: type[C], config_file: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> C:
    """Return an instance of dataclass `cls` with the YAML file and overrides applied."""
    merged = OmegaConf.structured(cls)
    layers = [(_parse_overrides(overrides), "command line")]
    if config_file is not None:
        layers.insert(0, (_load_yaml(config_file), f"--config {config_file}"))
    for layer, source in layers:
        try:  # merge one layer at a time so a type error names where the value came from
            merged = OmegaConf.merge(merged, _checked(cls, layer, source))
        except OmegaConfBaseException as e:
            raise ConfigError(f"{source}: {_type_error_message(cls, e)}") from None
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def valid_keys(cls: type) -> dict[str, dataclasses.Field]:
    """Every leaf key of the dataclass tree, dotted (`actor_rollout_ref.actor.clip_ratio`)."""
    keys: dict[str, dataclasses.Field] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys.update({f"{f.name}.{k}": v for k, v in valid_keys(hints[f.name]).items()})
        else:
            keys[f.name] = f
    return keys


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
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _load_yaml(path: str) -> DictConfig:
    import yaml

    if not os.path.isfile(path):
        raise ConfigError(f"--config {path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
        loaded = {} if loaded is None else loaded  # an empty file sets nothing
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"--config {path}: expected a mapping of keys at the top level, got {type(loaded).__name__}")
    return OmegaConf.create(loaded)


def _parse_overrides(overrides: list[str] | tuple[str, ...]) -> DictConfig:
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key or key.startswith("-"):
            raise ConfigError(f"override {item!r} must look like key=value (for example data.train_batch_size=32)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except Exception as e:  # OmegaConf and YAML parser errors alike, e.g. `key=[a, b`
        raise ConfigError(f"cannot parse overrides {list(overrides)}: {str(e).splitlines()[0]}") from None


def _checked(cls: type, cfg: DictConfig, source: str) -> DictConfig:
    """A copy of cfg with dotted keys expanded (`data.seed: 1` in YAML) and scalars given for list
    keys wrapped in a list; unknown keys are an error naming the closest valid one."""
    keys = valid_keys(cls)
    free = {k for k in keys if field_type(cls, k) is dict or typing.get_origin(field_type(cls, k)) is dict}
    out = OmegaConf.create()
    for dotted, value in _leaves(cfg, free=free):
        if dotted not in keys:
            group = next((k for k in keys if k.startswith(dotted + ".")), None)
            if group is not None:
                raise ConfigError(f"{source}: {dotted!r} is a group of keys, not a value; set e.g. {group}=...")
            raise ConfigError(f"{source}: unknown key {dotted!r}; {_suggest(dotted, list(keys))}")
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


def _suggest(dotted: str, keys: list[str]) -> str:
    close = difflib.get_close_matches(dotted, keys, n=1, cutoff=0.6)
    if not close:  # a right leaf under a wrong group: compare leaf names
        leaf = dotted.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
        close = [by_leaf[m] for m in difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)]
    if not close:
        return "no similar key exists (--help lists every key)"
    return f"did you mean {close[0]!r}? (--help lists every key)"


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
