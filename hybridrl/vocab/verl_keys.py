"""verl's config keys that hybridrl has no field for, each with its own answer.

A verl command line or config file is meant to run here unchanged where it can. A key of verl's that
the schema (config/schema.py) lacks is looked up in this table before the loader falls back to "unknown
key; did you mean ...":
- accepted, when the value is one of the entry's `accepted` values: those that train here exactly as
  verl trains with them (the key picks something hybridrl has only one of), or any value for keys
  that change nothing hybridrl computes (verl's bookkeeping, options of a feature that is off). The
  value is then dropped, since no code would read it. These keys are not schema fields: a field that
  cannot take a second value would only lengthen `--help` and every run's config.yaml;
- otherwise refused, in one line: what the key does in verl, why it is not here, and what to use
  instead.
The facts come from verl's trainer config (verl/trainer/config/*.yaml, early 2026) and its example
scripts, including older versions that are still copied (`ppo_micro_batch_size`, `val_batch_size`...).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Optional

from hybridrl.vocab.verl_key_table import ANY, TABLE, VerlKey

__all__ = ["ANY", "TABLE", "VerlKey", "Verdict", "judge", "entry_for"]


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str  # the one-line refusal ("" when accepted)


def entry_for(dotted: str) -> Optional[VerlKey]:
    """The first table entry whose pattern matches the dotted key (`*` spans dots), or None."""
    for entry in TABLE:
        if any(fnmatch.fnmatchcase(dotted, p) for p in entry.patterns):
            return entry
    return None


def judge(dotted: str, value: Any) -> Optional[Verdict]:
    """Accept or refuse one verl key given `value`; None when the table does not know the key."""
    entry = entry_for(dotted)
    if entry is None:
        return None
    if entry.accepted is ANY or normalise(value) in {normalise(v) for v in entry.accepted}:
        return Verdict(True, "")
    return Verdict(False, refusal(entry, dotted, value))


def refusal(entry: VerlKey, dotted: str, value: Any) -> str:
    """`key=value: in verl, <what it does>; <why not here>; <what instead> (accepted here: ...)`, with
    {key}, {leaf}, {parent}, {grandparent} and {value} in the entry's texts filled in."""
    parent = dotted.rsplit(".", 1)[0]
    fill = {"{key}": dotted, "{leaf}": dotted.rsplit(".", 1)[-1], "{parent}": parent,
            "{grandparent}": parent.rsplit(".", 1)[0], "{value}": _show(value)}
    parts = []
    for text in (entry.verl, entry.here, entry.instead):
        for name, sub in fill.items():
            text = text.replace(name, sub)
        parts.append(text)
    accepted = f" (accepted here: {', '.join(_show(v) for v in entry.accepted)})" if entry.accepted else ""
    return f"{dotted}={_show(value)}: in verl, {parts[0]}; {parts[1]}; {parts[2]}{accepted}"


def normalise(value: Any) -> str:
    """One spelling per value: True/true/'True' -> 'true', None/'null'/'None' -> 'null', 1/1.0 -> '1',
    lists compared as sets (verl's checkpoint contents), strings case-insensitively."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(sorted(normalise(v) for v in value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{k}:{normalise(v)}" for k, v in value.items())) + "}"
    text = str(value).strip().lower()
    return "null" if text in ("null", "none", "~") else text


def _show(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
