"""Build a typed config from defaults, an optional YAML file and dotted overrides.

Order: dataclass defaults < YAML file < `key=value` overrides (Hydra's `+key=value` and
`++key=value` too). Every key is checked against the dataclass tree first: a verl key the
schema lacks gets its own answer from config/verl_keys.py (accepted, or refused saying why),
any other unknown key is an error naming the closest valid key of its section, and every
value is type-checked by OmegaConf, re-worded as one line naming the key and the expected type.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridrl.config.schema import RLConfig
from hybridrl.config.verl_keys import judge as judge_verl_key
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
    """Dotted `key=value` items; Hydra's `+key=value` (add) and `++key=value` (add or override) are
    `key=value` here, since every key already exists with its default."""
    items = []
    for item in overrides:
        if item.startswith("~"):
            raise ConfigError(f"override {item!r}: Hydra's ~ deletes a key from verl's config, but hybridrl's keys "
                              "are typed fields that always exist; leave the override out to keep the default "
                              f"(`hybridrl train --help` shows it), or set {item[1:].partition('=')[0]}=<value>")
        item = item[2:] if item.startswith("++") else item[1:] if item.startswith("+") else item
        key, sep, _ = item.partition("=")
        if not sep or not key or key.startswith(("-", "+")):
            raise ConfigError(f"override {item!r} must look like key=value (for example data.train_batch_size=32)")
        items.append(item)
    try:
        return OmegaConf.from_dotlist(items)
    except Exception as e:  # OmegaConf and YAML parser errors alike, e.g. `key=[a, b`
        raise ConfigError(f"cannot parse overrides {items}: {str(e).splitlines()[0]}") from None


def _checked(cls: type, cfg: DictConfig, source: str) -> DictConfig:
    """A copy of cfg with dotted keys expanded (`data.seed: 1` in YAML) and scalars given for list
    keys wrapped in a list; an unknown key is an error (see _unknown_key_problem)."""
    keys = valid_keys(cls)
    free = {k for k in keys if field_type(cls, k) is dict or typing.get_origin(field_type(cls, k)) is dict}
    out = OmegaConf.create()
    for dotted, value in _leaves(cfg, free=free):
        if dotted not in keys:
            problem = _unknown_key_problem(cls, dotted, value, keys)
            if problem is None:  # a verl key accepted with the one behaviour hybridrl has: nothing reads it
                continue
            raise ConfigError(f"{source}: {problem}")
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
    """Why a key the schema lacks is refused, or None when it is a verl key accepted with this value."""
    group = next((k for k in keys if k.startswith(dotted + ".")), None)
    if group is not None:
        return f"{dotted!r} is a group of keys, not a value; set e.g. {group}=..."
    if cls is RLConfig:
        verdict = judge_verl_key(dotted, value)
        if verdict is not None:
            return None if verdict.accepted else verdict.message
    return f"unknown key {dotted!r}; {_suggest(dotted, list(keys))}"


def _section(dotted: str) -> str:
    """The part of the config a key belongs to: a top-level group (data, critic, trainer ...), or
    one of actor_rollout_ref's roles (actor_rollout_ref.actor, .rollout, .ref, .model)."""
    parts = dotted.split(".")
    return ".".join(parts[:2]) if parts[0] == "actor_rollout_ref" and len(parts) > 2 else parts[0]


def _suggest(dotted: str, keys: list[str]) -> str:
    """The closest valid keys, never one of an unrelated section (a critic key for an actor key): the
    closest key of the typed key's own section (a misspelt section name is read as the section it is
    closest to), and the same leaf in a sibling role of actor_rollout_ref (the typed
    actor.log_prob_micro_batch_size_per_gpu is rollout's); a key under a section that does not exist is
    matched by its leaf, in the group whose name is closest (actor.use_kl_loss ->
    actor_rollout_ref.actor.use_kl_loss)."""
    sections = sorted({_section(k) for k in keys})
    section, leaf = _section(dotted), _leaf(dotted)
    known = difflib.get_close_matches(section, sections, n=1, cutoff=0.8)
    if known:
        rest = {k[len(known[0]) + 1:]: k for k in keys if _section(k) == known[0]}
        close = [rest[m] for m in difflib.get_close_matches(dotted[len(section) + 1:], list(rest), n=1, cutoff=0.6)]
        top = known[0].split(".")[0]
        close += [k for k in keys if k.split(".")[0] == top and _leaf(k) == leaf and k not in close][:1]
    else:
        ranked = sorted(((_likeness(leaf, _leaf(k)), _group_likeness(dotted, k), k) for k in keys), reverse=True)
        close = [k for by_leaf, _, k in ranked[:1] if by_leaf >= 0.75]
    if not close:
        return "no similar key exists (--help lists every key)"
    return f"did you mean {' or '.join(repr(k) for k in close)}? (--help lists every key)"


def _leaf(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def _likeness(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _group_likeness(dotted: str, key: str) -> float:
    """How alike the groups of two keys look: the typed key's innermost group name against each of the
    candidate's group names (`actor` is like `actor_rollout_ref.actor`, not `critic`)."""
    typed = dotted.rsplit(".", 1)[0].rsplit(".", 1)[-1] if "." in dotted else ""
    return max(_likeness(typed, g) for g in key.split(".")[:-1] or [""])


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
