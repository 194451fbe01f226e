"""Training curves of one or more runs on one image (`hybridrl plot`).

A fixed grid of the panels that tell whether RL post-training is working: reward going up,
validation accuracy following it, KL and entropy not running away, response length and step time.
Each run keeps one colour in every panel, so a panel can be read against the others.
"""

from __future__ import annotations

import os

from hybridrl.errors import HybridRLError
from hybridrl.eval.runs import Run, Series, kl_key, val_accuracy
from hybridrl.paths import check_output_file

PANELS = ("reward", "validation accuracy", "KL", "entropy", "response length", "step time (s)")
_KEYS = {"reward": "critic/score/mean", "entropy": "actor/entropy", "response length": "response_length/mean",
         "step time (s)": "timing_s/step"}
VAL_LABEL = "mean of val-core/*/reward/mean@N"


def panel_series(panel: str, run: Run) -> tuple[str, Series] | None:
    """(what is plotted, its points) for one run in one panel; None when the run did not log it."""
    if panel == "validation accuracy":
        points = val_accuracy(run)
        return (VAL_LABEL, points) if points else None
    key = kl_key(run) if panel == "KL" else _KEYS[panel]
    return (key, run.series[key]) if key in run.series else None


def _canvas_filetypes() -> dict[str, str]:
    try:  # the Agg canvas of a bare Figure: no display needed, no pyplot global state touched
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise HybridRLError("plotting needs matplotlib: pip install matplotlib "
                            "(or pip install 'hybridrl[plot]')") from e
    return FigureCanvasAgg(Figure()).get_supported_filetypes()


def check_image_path(out_path: str, flag: str) -> None:
    """An image format matplotlib writes (by the extension) at a path that can be written, checked before
    any run is read."""
    ext = os.path.splitext(out_path)[1].lstrip(".").lower()
    if ext not in _canvas_filetypes():
        what = f"a '.{ext}' image" if ext else "an image without an extension, which gives its format"
        raise HybridRLError(f"{flag} {out_path}: cannot write {what}; name it .png (or .pdf, .svg)")
    check_output_file(out_path, flag)


def plot_runs(runs: list[Run], out_path: str):
    """Draw the PANELS grid for `runs` into `out_path` (format by its extension) and return the
    matplotlib Figure: axes titled "<panel>: <metric>", one line per run labelled with its name."""
    check_image_path(out_path, "-o")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(16, 9), layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas of a bare Figure: no display needed, no pyplot global state touched
    styles = [{"color": f"C{i % 10}", "linestyle": ("-", "--", ":")[i // 10 % 3]} for i in range(len(runs))]
    for ax, panel in zip(fig.subplots(2, 3).flat, PANELS):
        drawn = [(run, style, found) for run, style in zip(runs, styles) if (found := panel_series(panel, run))]
        if not drawn:
            ax.set_title(f"{panel}: not logged")
            ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", color="grey")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for run, style, (_, points) in drawn:
            steps, values = zip(*points)
            sparse = panel == "validation accuracy" or len(points) == 1  # a marker per point, or nothing shows
            ax.plot(steps, values, label=run.name, marker="o" if sparse else None, markersize=4, **style)
        metrics = sorted({metric for *_, (metric, _) in drawn})
        ax.set_title(f"{panel}: {metrics[0] if len(metrics) == 1 else 'metric per run, see legend'}", fontsize=11)
        if len(metrics) > 1:  # KL: runs optimise different KLs; say which line is which
            ax.legend(ax.lines, [metric for *_, (metric, _) in drawn], fontsize="small")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.legend([Line2D([], [], **style) for style in styles], [run.name for run in runs],
               loc="outside lower center", ncols=min(len(runs), 3))
    return save_figure(fig, out_path)


def save_figure(fig, out_path: str, dpi: int = 110):
    """Write `fig` to `out_path` (the format by its extension), its folder made; `fig` back. A failed write is
    the -o option's error, not a traceback."""
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    try:
        fig.savefig(out_path, dpi=dpi)
    except OSError as e:  # the disk filled, or the path changed since the check
        raise HybridRLError(f"-o {out_path}: cannot write it ({e.strerror or e})") from None
    return fig
