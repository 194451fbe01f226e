"""A sweep on one image (`hybridrl plot --sweep SWEEP_DIR`): the sweep's metric against each swept key, and the
metric over steps.

Each key panel has a point per trial at (its sampled value, its best value of the metric by the sweep's mode), as
`hybridrl compare SWEEP_DIR` ranks them. Trials that a scheduler stopped early are drawn apart from finished
ones, because their best comes from fewer steps. Trials whose config was refused have no metric: they are
crosses along the panel's bottom edge, at their sampled value. The last panel draws the metric over steps, the best
trial in colour and the other trials in grey.
"""

from __future__ import annotations

import os
from typing import Any

from hybridrl.errors import DataError
from hybridrl.eval.plot import save_figure
from hybridrl.eval.runs import load_run
from hybridrl.sweep.results import TrialRow, is_sweep_folder, read_sweep
from hybridrl.sweep.select import axis_of, best_row, end_of, swept_entries
from hybridrl.sweep.space import Entry

# how each kind of end is drawn, and its legend label
MARKS = {"finished": {"marker": "o", "color": "C0", "label": "finished"},
         "stopped": {"marker": "v", "color": "C1", "label": "stopped early"},
         "running": {"marker": ">", "color": "C2", "label": "still running"},
         "error": {"marker": "x", "color": "C3", "label": "failed (no metric; at the bottom)"},
         "unknown": {"marker": "s", "color": "C7", "label": "end unknown (no readable trial.json)"}}
JITTER = 0.08  # spacing of trials that share a category, so that each one shows


def read_for_plot(folder: str) -> tuple[dict[str, Any], list[TrialRow]]:
    """The sweep's file and its rows, with an error naming the folder when there is nothing to plot."""
    if not is_sweep_folder(folder):
        what = "no such folder" if not os.path.isdir(folder) else "no sweep.yaml in it"
        raise DataError(f"--sweep {folder}: not a sweep folder ({what}); give a sweep's output folder, or plot runs "
                        "with hybridrl plot RUN_DIR ...")
    spec, rows = read_sweep(folder)
    if best_row(rows) is None:
        ends = ", ".join(f"{r.trial}: {r.status}" for r in rows)
        raise DataError(f"--sweep {folder}: no trial has logged {spec.get('metric')} yet ({ends}); plot it once a "
                        "trial has validated")
    return spec, rows


def key_points(entry: Entry, rows: list[TrialRow]) -> dict[str, list[tuple[float, Any, str]]]:
    """{end: [(x, best or None, trial)]} for one key's panel. x is the sampled value on a log or linear axis,
    else the value's index among the entry's values, spread by JITTER among the trials sharing it."""
    cats = list(entry.values) + sorted({r.sampled[entry.key] for r in rows if entry.key in r.sampled}
                                       - set(entry.values), key=str)
    seen: dict[int, int] = {}
    points: dict[str, list[tuple[float, Any, str]]] = {end: [] for end in MARKS}
    for r in sorted(rows, key=lambda r: r.trial):
        if entry.key not in r.sampled:
            continue
        value = r.sampled[entry.key]
        if axis_of(entry) == "category":
            i = cats.index(value)
            seen[i] = seen.get(i, 0) + 1
            x = i + (seen[i] - 1) * JITTER
        else:
            x = float(value)
        points[end_of(r)].append((x, None if end_of(r) == "error" else r.best, r.trial))
    return points


def sweep_figure(folder: str):
    """The figure (not saved): a panel per swept key titled with it, then the metric over steps."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    spec, rows = read_for_plot(folder)
    entries, metric, mode = swept_entries(spec), spec.get("metric", ""), spec.get("mode", "max")
    cols = min(len(entries) + 1, 3)
    nrows = -(-(len(entries) + 1) // cols)
    fig = Figure(figsize=(5.2 * cols, 3.8 * nrows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)  # no display, no pyplot global state
    axes = fig.subplots(nrows, cols, squeeze=False).flat
    for entry, ax in zip(entries, axes):  # entries first: zip must not take an axis it then drops
        _key_panel(ax, entry, rows, f"best {metric} ({mode})")
    _steps_panel(next(axes), folder, rows, metric)
    for ax in axes:  # the grid's unused cells
        ax.set_visible(False)
    handles = {h.get_label(): h for ax in fig.axes for h in ax.collections if not h.get_label().startswith("_")}
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=3)
    fig.suptitle(f"sweep {os.path.basename(os.path.abspath(folder))}: {len(rows)} trials")
    return fig


def _key_panel(ax, entry: Entry, rows: list[TrialRow], ylabel: str) -> None:
    for end, pts in key_points(entry, rows).items():
        if not pts:
            continue
        bottom = [x for x, y, _ in pts if y is None]  # no metric (a refused config, nothing logged): the bottom edge
        if bottom:  # (x in data units, y in axes units)
            ax.scatter(bottom, [0.03] * len(bottom), transform=ax.get_xaxis_transform(), **MARKS[end])
        if len(bottom) < len(pts):
            ax.scatter([x for x, y, _ in pts if y is not None], [y for _, y, _ in pts if y is not None], alpha=0.8,
                       **{**MARKS[end], "label": MARKS[end]["label"] if not bottom else "_" + end})
    _x_axis(ax, entry)
    ax.set_title(f"{entry.key} ({entry.kind})", fontsize=10)
    ax.set_xlabel(entry.key)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(alpha=0.3)


def _x_axis(ax, entry: Entry) -> None:
    """Categories at 0, 1, ... labelled with their values; a range spans the searched [lo, hi], so that where the
    trials fell in it shows."""
    if axis_of(entry) == "category":
        ax.set_xticks(range(len(entry.values)), [str(v) for v in entry.values])
        ax.set_xlim(-0.5, len(entry.values) - 0.5)
        return
    lo, hi = entry.values
    if axis_of(entry) == "log":
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # labels at every 2..9 x 10^k overlap
        ax.set_xlim(lo / 1.1, hi * 1.1)
    else:
        ax.set_xlim(lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo))


def _steps_panel(ax, folder: str, rows: list[TrialRow], metric: str) -> None:
    best, others = best_row(rows), 0
    for r in sorted(rows, key=lambda r: r is best):  # the best one drawn last, on top
        try:
            points = load_run(os.path.join(folder, r.trial)).series.get(metric, [])
        except DataError:  # an errored trial: no metrics.jsonl
            continue
        if not points:
            continue
        steps, values = zip(*points)
        if r is best:
            ax.plot(steps, values, color="C0", linewidth=2, marker="o", markersize=3, label=f"best: {r.trial}")
        else:
            ax.plot(steps, values, color="0.7", linewidth=1, label="other trials" if not others else "_other")
            others += 1
    ax.set_title(f"best trial {best.trial}: {metric}", fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(metric, fontsize=9)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def plot_sweep(folder: str, out_path: str):
    """Draw sweep_figure(folder) into out_path (format by its extension); return the figure."""
    return save_figure(sweep_figure(folder), out_path)
