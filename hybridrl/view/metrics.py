"""A run's metrics.jsonl as columns, parsed once and kept: each request slices them.

Parsing is most of what opening a long run costs (10,000 lines x 40 values: ~0.3 s of json.loads and
column building on one core); kept here, a reload, a second browser tab, the A/B table and every live
poll cost only the lines appended since. A request may also ask for some sections' series only
(section = the key's prefix before the first "/"), so the page's first load ships the charts it shows.
"""

from __future__ import annotations

import json
from typing import Iterable, Optional

from hybridrl.view.index import LineIndex

_NONFINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def section_of(key: str) -> str:
    """The page's grouping of a metric: "actor/entropy" -> "actor"; a key without "/" -> "other"."""
    head, sep, _ = key.partition("/")
    return head if sep else "other"


class MetricsTable:
    """steps[i] and series[key][i] (a value or None) for the i-th valid line; `generation` changes when
    the file was rewritten (a resumed run), so a client's row count is stale."""

    def __init__(self, index: LineIndex):
        self.index = index
        self.steps: list[int] = []
        self.series: dict[str, list] = {}
        self.skipped = 0  # lines that are not a JSON object with an int step
        self._parsed_end = 0  # byte offset up to which lines are in the columns
        self._parsed_generation = index.generation  # the index generation those lines came from

    @property
    def generation(self) -> int:
        return self.index.generation

    def refresh(self) -> None:
        """Parse the complete lines appended since the last call; start over if the file was rewritten."""
        self.index.refresh()  # (others refresh the index too, e.g. the run summary: compare generations, not calls)
        if self.index.generation != self._parsed_generation or self._parsed_end > self.index.end:
            self.steps, self.series, self.skipped, self._parsed_end = [], {}, 0, 0
            self._parsed_generation = self.index.generation
        lines, self._parsed_end = self.index.read_from(self._parsed_end)
        self._append(lines)

    def _append(self, lines: list[bytes]) -> None:
        steps, series = self.steps, self.series
        for line in lines:
            record = _record(line)
            if record is None:
                self.skipped += 1
                continue
            i = len(steps)
            steps.append(record.pop("step"))
            for key, value in record.items():
                if (column := series.get(key)) is None:
                    column = series[key] = [None] * i  # a key first logged at this line
                elif len(column) < i:
                    column.extend([None] * (i - len(column)))  # lines that did not log it
                column.append(value)
        for column in series.values():
            column.extend([None] * (len(steps) - len(column)))

    def select(self, since: int = 0, upto: Optional[int] = None, sections: Optional[Iterable[str]] = None,
               keys: Iterable[str] = ()) -> dict:
        """Rows since..upto-1: {"steps", "series": {key: column}} for the keys of `sections` (None: every
        section) and the named `keys`, "names": every key logged (for the page's section list), "rows":
        the row count, "generation", "skipped"."""
        wanted = set(keys)
        secs = None if sections is None else set(sections)
        chosen = [k for k in self.series if k in wanted or secs is None or section_of(k) in secs]
        cut = slice(max(0, since), upto)
        return {"steps": self.steps[cut], "series": {k: self.series[k][cut] for k in chosen},
                "names": sorted(self.series), "rows": len(self.steps), "generation": self.generation,
                "skipped": self.skipped}


def _record(line: bytes) -> Optional[dict]:
    """A metrics line as {step, key: number}, non-finite strings kept as strings; None if it is not one."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if type(record) is not dict or type(record.get("step")) is not int:  # type(): a bool step is no step
        return None
    out = {"step": record["step"]}
    for key, value in record.items():
        kind = type(value)
        if kind is float or kind is int:  # (bool is its own type, left out)
            if key != "step":
                out[key] = value
        elif kind is str and value.lower() in _NONFINITE:
            out[key] = value.lower()  # JSON has no NaN: the page turns these strings back into numbers
    return out
