"""A sweep's search space: one entry per config key, checked, and translated into Ray Tune's domains.

An entry is a mapping with exactly one kind:
  {choice: [a, b, ...]}    one value drawn at random per trial
  {grid: [a, b, ...]}      every value, crossed with the other grid entries (Tune's grid_search)
  {uniform: [lo, hi]}      a float drawn uniformly from [lo, hi]
  {loguniform: [lo, hi]}   a float whose log is uniform on [log lo, log hi] (0 < lo < hi): learning rates
  {randint: [lo, hi]}      an integer from lo to hi, both included
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

KINDS = ("choice", "grid", "uniform", "loguniform", "randint")
LISTS = ("choice", "grid")  # a list of values; the others take [lo, hi]


@dataclass(frozen=True)
class Entry:
    """One swept key: its kind (one of KINDS) and its values ([lo, hi] for a range)."""

    key: str
    kind: str
    values: tuple[Any, ...]

    def probe(self) -> Any:
        """A value of the entry's type, to check the key against the config schema before any trial runs."""
        return self.values[0]


def is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _range_problem(kind: str, values: list) -> str | None:
    """What is wrong with a [lo, hi] of `kind`, or None."""
    if len(values) != 2 or not all(is_number(v) for v in values):
        return "give two numbers [lo, hi]"
    lo, hi = values
    if not all(math.isfinite(v) for v in values):  # nan compares false both ways; inf has no uniform draw
        return "give two finite numbers [lo, hi]"
    if kind == "randint" and not all(isinstance(v, numbers.Integral) for v in values):
        return "give two integers [lo, hi]"
    if not lo < hi:
        return f"lo={lo} must be below hi={hi}"
    if kind == "loguniform" and lo <= 0:
        return f"lo={lo}: a log-uniform range needs 0 < lo (e.g. [1e-6, 1e-4])"
    return None


def parse_entry(key: str, raw: Any) -> tuple[Entry | None, str | None]:
    """(Entry, None) for a well-formed entry, else (None, a message naming the key and the fix)."""
    where = f"space.{key}"
    if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in KINDS:
        got = list(raw) if isinstance(raw, Mapping) else repr(raw)
        return None, (f"{where}: got {got}; give exactly one of {', '.join(KINDS)}, e.g. "
                      f"{key}: {{grid: [1.0e-6, 3.0e-6]}}")
    kind, values = next(iter(raw.items()))
    if not isinstance(values, list) or not values:
        return None, f"{where}.{kind}: got {values!r}; give a non-empty list"
    if kind not in LISTS and (problem := _range_problem(kind, values)):
        return None, f"{where}.{kind}: {values}: {problem}"
    if kind == "grid" and (twice := _repeated(values)):  # each would be one more identical trial
        return None, f"{where}.grid: {values}: lists {', '.join(map(repr, twice))} more than once; list each value once"
    return Entry(key, kind, tuple(values)), None


def _repeated(values: list) -> list:
    """The values listed more than once (1 and 1.0 are one value, as they are to the config), in order."""
    seen, out = [], []
    for v in values:
        if v in seen and v not in out:
            out.append(seen[seen.index(v)])  # as first listed
        seen.append(v)
    return out


def space_problems(entries: list[Entry], search: str) -> list[str]:
    """The rules between the entries and the search algorithm."""
    if search == "grid":
        return [f"space.{e.key}: {e.kind} under search=grid; give it as grid: [...] (grid search enumerates values), "
                "or use search=random" for e in entries if e.kind != "grid"]
    if search == "tpe":
        return [f"space.{e.key}: grid under search=tpe; TPE samples every key, give it as choice: [...]"
                for e in entries if e.kind == "grid"]
    return []


def grid_size(entries: list[Entry]) -> int:
    """Trials one pass over the grid entries makes (1 without any): the product of their lengths."""
    size = 1
    for e in entries:
        if e.kind == "grid":
            size *= len(e.values)
    return size


def to_tune(entries: list[Entry]) -> dict[str, Any]:
    """Tune's param_space: {config key: a ray.tune domain} (flat: the keys keep their dots)."""
    from ray import tune

    make = {"choice": lambda v: tune.choice(list(v)), "grid": lambda v: tune.grid_search(list(v)),
            "uniform": lambda v: tune.uniform(*v), "loguniform": lambda v: tune.loguniform(*v),
            "randint": lambda v: tune.randint(v[0], v[1] + 1)}  # Tune's upper bound is excluded; ours is included
    return {e.key: make[e.kind](e.values) for e in entries}
