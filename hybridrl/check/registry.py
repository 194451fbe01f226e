"""The checks of `hybridrl check`, in the order they run and are reported. Each is a function of the
CheckContext returning a Result; its docstring says what it proves (`hybridrl check --list` prints them)."""

from __future__ import annotations

from typing import Callable

from hybridrl.check.result import Result
from hybridrl.registry import Registry

CheckFn = Callable[..., Result]
CHECKS: Registry[CheckFn] = Registry("check", "--only")
ORDER = ("config", "data", "reward", "sampling", "update", "multi-turn", "resume", "export", "scale", "environment")
# the module of each check (imported by load_checks; one module per check, each registering itself)
MODULES = {"config": "config_keys", "data": "data", "reward": "reward", "sampling": "sampling", "update": "update",
           "multi-turn": "multi_turn", "resume": "resume", "export": "export", "scale": "scale",
           "environment": "environment"}


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under `name` (one of ORDER); its docstring's first paragraph is what it proves."""
    if name not in ORDER:
        raise ValueError(f"check {name!r} is not in ORDER")

    def add(fn: CheckFn) -> CheckFn:
        doc = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
        if not doc:
            raise ValueError(f"check {name!r} needs a docstring saying what it proves")
        return CHECKS.register(name, doc)(fn)

    return add


def load_checks() -> list:
    """Every check's registry entry, in ORDER."""
    import importlib

    for name in ORDER:
        if name not in CHECKS:
            importlib.import_module(f"hybridrl.check.{MODULES[name]}")
    return [CHECKS.entry(name) for name in ORDER]
