"""`hybridrl view SWEEP_DIR`: the viewer over a sweep folder. Each trial that has logged is one of the viewer's runs
(its curves and generations as for any run), and /api/sweep lists every trial with its sampled values, status and
metric, filtered by value and sorted. The sweep folder is read again on each request, so a running sweep's trials
move on the page; a trial that starts after the viewer is listed, but its run view needs a restart of the viewer.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

from fastapi import APIRouter
from starlette.exceptions import HTTPException

from hybridrl.errors import DataError
from hybridrl.sweep.results import TrialRow, is_sweep_folder, read_sweep
from hybridrl.sweep.select import (COLUMNS, FilterError, axis_of, end_of, keeps, parse_filters, sort_rows,
                                   swept_entries)
from hybridrl.view.runs import ViewError


class SweepFolder:
    """A sweep's output folder, as the viewer serves it."""

    def __init__(self, path: str):
        if not is_sweep_folder(path):
            raise DataError(f"{path}: not a sweep folder (no sweep.yaml); give a sweep's output folder")
        self.path = os.path.abspath(path)
        self.read()  # a folder without trials is an error at start, not an empty page

    def read(self) -> tuple[dict[str, Any], list[TrialRow]]:
        return read_sweep(self.path)

    def run_folders(self) -> list[str]:
        """The trials' run folders that have a metrics.jsonl (a refused trial never writes one), by name."""
        _, rows = self.read()
        return [os.path.join(self.path, r.trial) for r in sorted(rows, key=lambda r: r.trial)
                if os.path.isfile(os.path.join(self.path, r.trial, "metrics.jsonl"))]

    def table(self, run_of: dict[str, int], filters: str = "", sort: str = "best", descending: Optional[bool] = None
              ) -> dict[str, Any]:
        """The page's table: the sweep's metric and keys, and the trials passing `filters` (JSON, see
        select.parse_filters) in `sort` order (default: best first by the sweep's mode). `run_of`: trial name ->
        its run id in the viewer."""
        spec, rows = self.read()
        entries = swept_entries(spec)
        mode = spec.get("mode", "max")
        if sort not in COLUMNS and sort not in {e.key for e in entries}:
            raise FilterError(f"sort={sort!r}: sort by one of {', '.join(COLUMNS)} or a swept key")
        try:
            raw = json.loads(filters) if filters else {}
        except json.JSONDecodeError as e:
            raise FilterError(f"filters: not JSON ({e.msg}); give e.g. {{\"key\": {{\"min\": 0.1}}}}") from None
        if not isinstance(raw, dict):
            raise FilterError(f"filters: give a JSON object {{key: condition}}, got {raw!r}")
        kept = [r for r in rows if keeps(r, parse_filters(raw, entries))]
        if descending is None:
            descending = sort == "best" and mode == "max"
        return {"metric": spec.get("metric", ""), "mode": mode, "total": len(rows), "shown": len(kept), "sort": sort,
                "desc": descending,
                "keys": [{"key": e.key, "kind": e.kind, "axis": axis_of(e), "values": list(e.values)} for e in entries],
                "trials": [_trial(r, run_of.get(r.trial)) for r in sort_rows(kept, sort, descending)]}


def _trial(r: TrialRow, run: Optional[int]) -> dict[str, Any]:
    def num(v: Optional[float]):
        return v if v is None or math.isfinite(v) else str(v)

    return {"trial": r.trial, "status": r.status, "end": end_of(r), "best": num(r.best), "final": num(r.final),
            "steps": r.steps, "sampled": r.sampled, "error": r.error, "run": run}


def sweep_routes(api: APIRouter, sweep: SweepFolder, run_of: dict[str, int], lock) -> None:
    """GET /api/sweep?filters=JSON&sort=COLUMN&desc=0|1: the trials table (SweepFolder.table)."""
    @api.get("/sweep")
    def trials(filters: str = "", sort: str = "best", desc: Optional[bool] = None):
        try:
            with lock:
                return sweep.table(run_of, filters, sort, desc)
        except FilterError as e:
            raise HTTPException(400, str(e)) from None
        except DataError as e:  # the folder went away, or lost its trials, while served
            raise ViewError(str(e)) from None
