"""A sweep folder read back for `hybridrl compare SWEEP_DIR`: one row per trial, best first by the sweep's
metric and mode, with the values the trial sampled.

A trial's status comes from its trial.json (sweep/trial.py): "finished"; "error" with the config error (or the
error its run stopped on); "running at step N" while a live run holds the trial's run lock (trainer/runlock.py);
else "stopped at step N": its run ended before its last step (an early-stopping scheduler, or an interrupted
sweep that has not been resumed yet).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from hybridrl.errors import DataError
from hybridrl.sweep.spec import SWEEP_FILE
from hybridrl.sweep.trial import TRIAL_FILE, read_trial_file
from hybridrl.trainer.runlock import holder

TUNE_PARAMS = "params.json"  # Tune writes a trial's sampled values there as it starts the trial


@dataclass(frozen=True)
class TrialRow:
    trial: str
    status: str
    sampled: dict[str, Any]
    best: Optional[float]  # the metric's best over the run's logged steps, by the sweep's mode
    final: Optional[float]  # its last logged value
    steps: int  # the last step the run logged (0: none)
    error: Optional[str] = None


def is_sweep_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, SWEEP_FILE))


def read_sweep(path: str) -> tuple[dict[str, Any], list[TrialRow]]:
    """(the sweep file as run, its trials best first; errored trials last)."""
    from hybridrl.sweep.spec import read_yaml

    spec = read_yaml(os.path.join(path, SWEEP_FILE))
    metric, mode = spec.get("metric", ""), spec.get("mode", "max")
    rows = [trial_row(os.path.join(path, name), metric, mode) for name in sorted(os.listdir(path))
            if any(os.path.isfile(os.path.join(path, name, f)) for f in (TRIAL_FILE, TUNE_PARAMS))]
    if not rows:
        raise DataError(f"{path}: a sweep folder without trials yet; run `hybridrl sweep` on its sweep file")
    sign = -1 if mode == "max" else 1
    rows.sort(key=lambda r: (r.best is None or math.isnan(r.best), sign * r.best if r.best is not None else 0.0))
    return spec, rows


def trial_row(folder: str, metric: str, mode: str) -> TrialRow:
    """The trial in `folder` as `compare` lists it (the sweep's console says the same at its end)."""
    from hybridrl.eval.runs import load_run

    info = _trial_info(folder)
    series, steps, problem = [], 0, info.get("error")
    if os.path.isfile(os.path.join(folder, "metrics.jsonl")):
        try:
            run = load_run(folder)
            series, steps = run.series.get(metric, []), run.last_step
        except DataError as e:  # a live run may have logged nothing yet; an ended one should have
            if info["status"] != "running":
                problem = problem or str(e)
    values = [v for _, v in series if not math.isnan(v)]
    best = (max if mode == "max" else min)(values) if values else None
    status = info["status"]
    if status == "running":
        status = f"{'running' if holder(folder) else 'stopped'} at step {steps}"
    return TrialRow(os.path.basename(folder), status, info["sampled"], best, series[-1][1] if series else None, steps,
                    problem)


def _trial_info(folder: str) -> dict[str, Any]:
    """The trial's trial.json; where it is missing or unreadable, a stand-in with status "unknown", the sampled
    values Tune wrote (params.json) and the reason as its error, so that the trial is listed, never dropped."""
    info, problem = read_trial_file(folder)
    if info is not None:
        return info
    try:
        with open(os.path.join(folder, TUNE_PARAMS), encoding="utf-8") as f:
            sampled = json.load(f)
    except (OSError, ValueError):
        sampled = {}
    return {"sampled": sampled if isinstance(sampled, dict) else {}, "status": "unknown", "error": problem}


def render_sweep(spec: dict[str, Any], rows: list[TrialRow]) -> str:
    """A fixed-width table: rank, trial, status, best and final metric, steps, then each swept key's value."""
    keys = list(spec.get("space", {}))
    metric = spec.get("metric", "")
    head = ["#", "trial", "status", f"best {metric} ({spec.get('mode', 'max')})", "final", "steps", *keys]
    table = [[str(i), r.trial, r.status, fmt_value(r.best), fmt_value(r.final), str(r.steps),
              *(fmt_value(r.sampled.get(k)) for k in keys)] for i, r in enumerate(rows, 1)]
    widths = [max(len(row[c]) for row in [head, *table]) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [head, *table]]
    lines += [f"{r.trial}: {r.error}" for r in rows if r.error]
    return "\n".join(lines)


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
