"""User code called by the driver loop at three points (hybridrl.train's callbacks=): after each step's
metrics are logged, after each validation (its extra metrics join the step's line), after each checkpoint.

A callback is any object with some of the methods below, or a plain function named after one of them
(`def on_validation(step, metrics): ...`). They run in the driver process, also with trainer.backend=ray,
so nothing is pickled. A callback that raises stops the run with an error naming it and the hook.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Mapping, Optional

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.user_code import failure, where

HOOKS = ("on_step_end", "on_validation", "on_save")
VAL_PREFIXES = ("val-core/", "val-aux/")  # verl's evaluator names; an extra metric without one gets val-core/


class Callback:
    """A base to subclass for editors and type checkers; override the hooks you need (all optional).

    - `on_step_end(step, metrics)`: after step `step` is logged; `metrics` is the step's line (a copy).
    - `on_validation(step, metrics) -> dict | None`: after validation at `step` (0: before training);
      returned `{name: number}` are logged with the step as `val-core/<name>` (a name starting with
      val-core/ or val-aux/ is kept as is).
    - `on_save(step, path)`: after the checkpoint `path` (a global_step_<N> folder) is written.
    """

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def on_validation(self, step: int, metrics: Mapping[str, float]) -> Optional[Mapping[str, float]]:
        return None

    def on_save(self, step: int, path: str) -> None:
        pass


class CallbackError(HybridRLError):
    """A callback raised, or returned metrics that cannot be logged."""


def _name(cb: Any) -> str:
    return getattr(cb, "__qualname__", None) or type(cb).__name__


class Callbacks:
    """The run's callbacks, called in the order given."""

    def __init__(self, callbacks: Iterable[Any] = ()):
        self.hooks: dict[str, list[tuple[str, Any]]] = {hook: [] for hook in HOOKS}
        for cb in callbacks:
            self._add(cb)

    def _add(self, cb: Any) -> None:
        name = getattr(cb, "__name__", None)
        if callable(cb) and name in HOOKS:  # a plain function: the hook its name says
            self.hooks[name].append((name, cb))
            return
        found = [hook for hook in HOOKS if callable(getattr(cb, hook, None))]
        if not found:
            raise ConfigError(f"callback {_name(cb)!r} has none of the hooks {', '.join(HOOKS)}; give an object with "
                              "some of these methods, or a function named after one of them")
        for hook in found:
            self.hooks[hook].append((f"{_name(cb)}.{hook}", getattr(cb, hook)))

    def _call(self, hook: str, step: int, *args: Any) -> list[tuple[str, Any]]:
        """(name, returned value) of every callback of `hook`; a raise becomes a CallbackError naming it."""
        out = []
        for name, fn in self.hooks[hook]:
            try:
                out.append((name, fn(step, *args)))
            except Exception as e:  # noqa: BLE001  the user's code: any error, reported with its name
                raise CallbackError(f"callback {name} failed at step {step}: {failure(e)}{where(e)}") from e
        return out

    def step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        self._call("on_step_end", step, dict(metrics))

    def save(self, step: int, path: str) -> None:
        self._call("on_save", step, path)

    def validation(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """The callbacks' extra validation metrics, named val-core/<name>; each must be a finite number and new."""
        extra: dict[str, float] = {}
        for name, returned in self._call("on_validation", step, dict(metrics)):
            if returned is None:
                continue
            if not isinstance(returned, Mapping):
                raise CallbackError(f"callback {name} returned {type(returned).__name__}; return a dict of "
                                    "{name: number} (or None)")
            for key, value in returned.items():
                full = key if str(key).startswith(VAL_PREFIXES) else f"val-core/{key}"
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                    raise CallbackError(f"callback {name} returned {key}={value!r}; each metric must be a finite number")
                if full in metrics or full in extra:
                    raise CallbackError(f"callback {name} returned {key!r}, but {full} is already logged at this "
                                        "step; give the metric another name")
                extra[full] = float(value)
        return extra
