"""A sweep's trials as `plot --sweep` and `view SWEEP_DIR` show them: each swept key's axis, each trial's kind of
end, and the trials kept by a filter on the sampled values, in a chosen order. Pure: rows come from
results.read_sweep, nothing here reads files.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from hybridrl.errors import DataError
from hybridrl.sweep.results import TrialRow
from hybridrl.sweep.space import LISTS, Entry, is_number, parse_entry

COLUMNS = ("trial", "status", "best", "final", "steps")  # the table's own columns; the swept keys follow


class FilterError(ValueError):
    """A filter the page (or a user of the API) gave that does not fit the sweep: its message names the key."""


def swept_entries(spec: Mapping[str, Any]) -> list[Entry]:
    """The sweep file's space as Entries, in the file's order (it was checked when the sweep ran)."""
    entries = []
    for key, raw in spec.get("space", {}).items():
        entry, problem = parse_entry(key, raw)
        if entry is None:
            raise DataError(f"sweep.yaml: {problem}")
        entries.append(entry)
    return entries


def axis_of(entry: Entry) -> str:
    """How a key's sampled values are laid out: "log" for loguniform (a learning rate's decades), "linear" for
    uniform and randint, "category" for choice and grid (their listed values, in the file's order, evenly spaced:
    [1e-6, 1e-5, 1e-4] or [grpo, rloo] alike)."""
    if entry.kind == "loguniform":
        return "log"
    return "category" if entry.kind in LISTS else "linear"


def end_of(row: TrialRow) -> str:
    """"finished", "running" (its run is live: results.py says "running at step N"), "stopped" (a scheduler
    stopped it early, or the sweep was cut: "stopped at step N"), "error" (its sampled config was refused, or its
    run stopped on an error) or "unknown" (no readable trial.json: results.py lists it with the reason)."""
    if row.status in ("finished", "error", "unknown"):
        return row.status
    return "running" if row.status.startswith("running") else "stopped"


def parse_filters(raw: Mapping[str, Any], entries: list[Entry]) -> dict[str, tuple[str, Any]]:
    """{key: ("range", (lo, hi))} from {key: {"min": lo, "max": hi}} (either bound may be missing or null), and
    {key: ("in", [values])} from {key: {"in": [values]}}, for swept keys only."""
    by_key = {e.key: e for e in entries}
    out: dict[str, tuple[str, Any]] = {}
    for key, cond in raw.items():
        if key not in by_key:
            raise FilterError(f"filter on {key!r}: not a swept key; the sweep's keys are {', '.join(by_key)}")
        if not isinstance(cond, Mapping) or not cond or not (set(cond) <= {"min", "max"} or set(cond) == {"in"}):
            raise FilterError(f"filter on {key!r}: got {cond!r}; give {{\"min\": lo, \"max\": hi}} or "
                              "{\"in\": [values]}")
        if "in" in cond:
            if not isinstance(cond["in"], list):
                raise FilterError(f"filter on {key!r}: 'in' takes a list of values, got {cond['in']!r}")
            out[key] = ("in", cond["in"])
            continue
        bounds = (cond.get("min"), cond.get("max"))
        if any(b is not None and not is_number(b) for b in bounds):
            raise FilterError(f"filter on {key!r}: min and max are numbers (or null), got {bounds}")
        out[key] = ("range", bounds)
    return out


def keeps(row: TrialRow, filters: Mapping[str, tuple[str, Any]]) -> bool:
    """Whether the trial's sampled values pass every filter (bounds included; a trial without the key fails)."""
    for key, (how, arg) in filters.items():
        if key not in row.sampled:
            return False
        value = row.sampled[key]
        if how == "in":
            if value not in arg:
                return False
            continue
        lo, hi = arg
        if not is_number(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
            return False
    return True


def sort_rows(rows: list[TrialRow], column: str, descending: bool = False) -> list[TrialRow]:
    """Rows by one of COLUMNS or a swept key; trials without a value (an errored trial's best) stay last in
    either direction. Strings sort after numbers."""
    def value(r: TrialRow) -> Any:
        if column in COLUMNS:
            return getattr(r, column)
        return r.sampled.get(column)

    def known(v: Any) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    have = [r for r in rows if known(value(r))]
    numbers = sorted((r for r in have if is_number(value(r))), key=value, reverse=descending)
    others = sorted((r for r in have if not is_number(value(r))), key=lambda r: str(value(r)), reverse=descending)
    return numbers + others + [r for r in rows if not known(value(r))]


def best_row(rows: list[TrialRow]) -> Optional[TrialRow]:
    """The best trial (read_sweep puts it first), or None when no trial has logged the metric."""
    return rows[0] if rows and rows[0].best is not None and not math.isnan(rows[0].best) else None
