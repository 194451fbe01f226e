"""The one generic check of single keys: every leaf's value against the constraints its `doc(...)`
declares in the schema (ranges, choices, list length; config/schema.py). Every violation of a
config is returned, one line each, so a command gets all its mistakes in one run; rules that tie
several keys together live in config/validate.py and plan/checks.py.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _fmt(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def range_text(meta: dict) -> str:
    """The valid range in words: `at least 1`, `> 0`, `in (0, 1]`, `-1 or at least 1`."""
    lo = next(((k, meta[k]) for k in ("ge", "gt") if k in meta), None)
    hi = next(((k, meta[k]) for k in ("le", "lt") if k in meta), None)
    if lo and hi:
        text = f"in {'[' if lo[0] == 'ge' else '('}{_fmt(lo[1])}, {_fmt(hi[1])}{']' if hi[0] == 'le' else ')'}"
    elif lo == ("ge", 1):
        text = "at least 1"
    else:
        text = " ".join(f"{op} {_fmt(meta[k])}" for k, op in BOUNDS if k in meta)
    also = meta.get("also", ())
    return " or ".join([*(_fmt(a) for a in also), text]) if text else ""


def _in_range(x: Any, meta: dict) -> bool:
    if x in meta.get("also", ()):
        return True
    checks = {"ge": lambda b: x >= b, "gt": lambda b: x > b, "le": lambda b: x <= b, "lt": lambda b: x < b}
    return all(check(meta[k]) for k, check in checks.items() if k in meta)  # nan fails every comparison


def problem(key: str, value: Any, meta: dict, nullable: bool = False) -> Optional[str]:
    """One line naming the key, its value and the valid values; None when the value is valid.
    `nullable`: the key is Optional, which the message says when no hint says more."""
    if value is None:  # only an Optional key can hold null (the type check saw to that)
        return None
    hint = f" {meta['hint']}" if "hint" in meta else " (or null)" if nullable else ""
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        return f"{key}={value!r} is not supported; valid values: {', '.join(choices)}{hint}"
    if isinstance(value, list):
        if "length" in meta and len(value) != meta["length"]:
            return f"{key}={value} must hold {meta['length']} values{hint}"
        bad = [x for x in value if isinstance(x, (int, float)) and not isinstance(x, bool) and not _ok_number(x, meta)]
        return f"{key}={value}: every value must be {range_text(meta)}{hint}" if bad else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not _ok_number(value, meta):
        if isinstance(value, float) and not math.isfinite(value) and not any(k in meta for k, _ in BOUNDS):
            return f"{key}={value} must be a finite number{hint}"
        finite = "a finite number " if isinstance(value, float) and not math.isfinite(value) else ""
        return f"{key}={value} must be {finite}{range_text(meta)}{hint}"
    return None


def _ok_number(x: Any, meta: dict) -> bool:
    if isinstance(x, float) and not math.isfinite(x):
        return False  # inf and nan are never a valid setting: an inf lr or clip corrupts training silently
    return _in_range(x, meta)


def check_constraints(cfg: Any, fields: dict[str, dataclasses.Field], skip: set[str] = frozenset(),
                      nullable: set[str] = frozenset()) -> dict[str, str]:
    """{key: problem} for every violation of the declared constraints in the config dataclass `cfg`, in
    schema order, one line each. `fields`: every dotted leaf key and its field (loader.valid_keys); keys
    in `skip` (already reported as unknown, mistyped ...) are left out; keys in `nullable` are Optional."""
    out = {}
    for key, f in fields.items():
        if key in skip:
            continue
        value = functools.reduce(getattr, key.split("."), cfg)
        message = problem(key, value, dict(f.metadata), key in nullable)
        if message:
            out[key] = message
    return out


def constraint_help(f: dataclasses.Field) -> str:
    """The constraint in words for `--help` (`; valid: ...`), empty when the key declares none."""
    meta = f.metadata
    if "choices" in meta:
        return f"; one of {', '.join(meta['choices'])}"
    text = range_text(meta)
    return f"; {text}" if text else ""
