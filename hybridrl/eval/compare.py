"""Side-by-side final and best metric values of training runs (`hybridrl compare`).

final: the value at the last step where the run logged the metric (NaN stays NaN: the run ended so).
best:  by the metric's direction, over the non-NaN values the run logged:
       max for rewards/scores, validation accuracy (val-core: mean@N, pass@k, maj@k), entropy and throughput;
       min for time and KL; none ("-") for anything else (response length, losses, the step count).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re

from hybridrl.errors import DataError
from hybridrl.eval.runs import Run, kl_key, val_keys

STEPS = "steps"  # the pseudo-metric "last step logged"
BEST_RULE = "best = max for reward, accuracy, pass/maj@k, entropy, throughput; min for time, KL; '-' none"
_MAX = ("val-core/", "critic/score/", "critic/rewards/", "reward/accuracy", "actor/entropy", "perf/throughput")
_MIN = ("timing_s/", "perf/cpu_time_s", "perf/time_per_step")
_TRAIN_KEYS = ("critic/score/mean", "response_length/mean", "actor/entropy")
_COST_KEYS = ("timing_s/step", "perf/cpu_time_s")


@dataclasses.dataclass(frozen=True)
class Row:
    """One metric across runs; `final[i]` and `best[i]` belong to run i, None where it never logged it."""

    metric: str
    best_is: str | None  # "max", "min" or None (no best)
    final: list[float | None]
    best: list[float | None]


def best_direction(key: str) -> str | None:
    """"max", "min" or None for a metric key, by the rule in the module docstring."""
    if key.startswith(_MAX):
        return "max"
    if key.startswith(_MIN) or "kl" in re.split(r"[/_]", key):
        return "min"
    return None


def default_keys(runs: list[Run]) -> list[str]:
    """Validation accuracy per source, reward, response length, entropy, each run's KL, time, steps;
    only those some run logged."""
    logged = {key for run in runs for key in run.series}
    kls = {kl_key(run) for run in runs} - {None}
    train = [k for k in (*_TRAIN_KEYS, *sorted(kls), *_COST_KEYS) if k in logged]
    return [*val_keys(logged), *train, STEPS]


def compare_table(runs: list[Run], keys: list[str] | None = None) -> list[Row]:
    """Rows for `keys` (default: `default_keys`); a key no run logged is an error, to catch typos."""
    keys = keys or default_keys(runs)
    logged = {key for run in runs for key in run.series} | {STEPS}
    if missing := [k for k in keys if k not in logged]:
        near = difflib.get_close_matches(missing[0], sorted(logged), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else "; see the keys in a run's metrics.jsonl"
        raise DataError(f"no run logged the metric {missing[0]!r}{hint}")
    return [_row(runs, key) for key in keys]


def _row(runs: list[Run], key: str) -> Row:
    if key == STEPS:
        return Row(key, None, [float(run.last_step) for run in runs], [None] * len(runs))
    direction = best_direction(key)
    final, best = [], []
    for run in runs:
        points = run.series.get(key, [])
        values = [v for _, v in points if not math.isnan(v)]
        final.append(points[-1][1] if points else None)
        best.append((max if direction == "max" else min)(values) if direction and values else None)
    return Row(key, direction, final, best)


def render(rows: list[Row], names: list[str]) -> str:
    """A fixed-width text table: a column pair (final, best) under each run's name."""
    cells = [[(_fmt(f), _fmt(b)) for f, b in zip(r.final, r.best)] for r in rows]
    w = max([len(c) for row in cells for pair in row for c in pair] + [len("final")])
    groups = [max(len(name), 2 * w + 2) for name in names]
    metric_w = max([len(r.metric) for r in rows] + [len("metric")])

    def line(metric: str, best: str, parts: list[str]) -> str:
        return "  ".join([f"{metric:<{metric_w}}", f"{best:<4}", *(p.ljust(g) for p, g in zip(parts, groups))]).rstrip()

    def pair(final: str, best: str) -> str:
        return f"{final:>{w}}  {best:>{w}}"

    return "\n".join([BEST_RULE, line("", "", names), line("metric", "best", [pair("final", "best")] * len(names)),
                      *(line(r.metric, r.best_is or "-", [pair(*p) for p in row]) for r, row in zip(rows, cells))])


def to_json(rows: list[Row], names: list[str]) -> dict:
    """The table as JSON-safe data: non-finite values as strings (as in metrics.jsonl), unlogged as null."""
    def value(v: float | None):
        return v if v is None or math.isfinite(v) else str(v)

    return {"best_rule": BEST_RULE, "runs": names,
            "rows": [{"metric": r.metric, "best_is": r.best_is,
                      "final": {n: value(v) for n, v in zip(names, r.final)},
                      "best": {n: value(v) for n, v in zip(names, r.best)}} for r in rows]}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
