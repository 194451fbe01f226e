"""One registry per plug-in family (advantage estimators, losses, KL types, scorers ...).

A decorator fills the dict; registering a name twice is an error; looking up an unknown
name is a `ConfigError` that lists the valid names. Call sites never special-case names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from hybridrl.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry(Generic[F]):
    name: str
    fn: F
    doc: str  # one line, shown by `hybridrl algos` and in errors
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"needs_groups": True}


class Registry(Generic[F]):
    def __init__(self, kind: str, config_key: str):
        self.kind = kind  # "advantage estimator"
        self.config_key = config_key  # "algorithm.adv_estimator", named in errors
        self._entries: dict[str, Entry[F]] = {}

    def register(self, name: str, doc: str, **meta: Any) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, fn, doc, meta)
            return fn

        return add

    def entry(self, name: str, key: str | None = None) -> Entry[F]:
        """The entry called `name`; an unknown name is an error naming `key` (default: config_key)."""
        if name not in self._entries:
            raise ConfigError(
                f"{key or self.config_key}={name!r} is not a known {self.kind}; "
                f"valid values: {', '.join(sorted(self._entries))}"
            )
        return self._entries[name]

    def get(self, name: str) -> F:
        return self.entry(name).fn

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry[F]]:
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: str) -> bool:
        return name in self._entries
