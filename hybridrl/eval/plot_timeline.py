"""A run's phase timeline (the Chrome-trace JSON of trainer.profile_timeline) as an image
(`hybridrl plot --timeline PATH`): one row per process, a bar per span coloured by its name, nested
spans (a phase inside its step) drawn below their parent within the row. The time axis starts at the
first track's (the driver's) first span: the workers' setup before it (model loading, often longer
than a short run's steps) would squeeze the steps into a sliver, so it is cut and its length named in
the title. For zooming into one step, open the JSON in ui.perfetto.dev; the image is the overview.
"""

from __future__ import annotations

import json
import os

from hybridrl.errors import HybridRLError
from hybridrl.eval.plot import check_image_path, save_figure


def read_timeline(path: str) -> tuple[list[str], dict[str, list[dict]]]:
    """(the track names in display order, each track's spans) of a timeline file."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except FileNotFoundError:
        raise HybridRLError(f"--timeline {path}: file not found; give the file trainer.profile_timeline wrote") from None
    except (ValueError, KeyError, TypeError) as e:
        raise HybridRLError(f"--timeline {path}: not a Chrome-trace JSON with traceEvents ({type(e).__name__}); give "
                            "the file trainer.profile_timeline wrote") from None
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("ph") == "M" and e.get("name") == "process_sort_index"}
    tracks: dict[str, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X":
            tracks.setdefault(names.get(e["pid"], f"pid {e['pid']}"), []).append(e)
    if not tracks:
        raise HybridRLError(f"--timeline {path}: no spans in it; was the run stopped before its first step?")
    sort_key = {names.get(pid, f"pid {pid}"): index for pid, index in order.items()}
    return sorted(tracks, key=lambda t: (sort_key.get(t, 0), t)), tracks


def depths(spans: list[dict]) -> list[int]:
    """Each span's nesting depth within its track (0: outermost), in the order of `spans`."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i]["ts"], -spans[i]["dur"]))
    out, open_ends = [0] * len(spans), []
    for i in order:
        start = spans[i]["ts"]
        while open_ends and open_ends[-1] <= start:  # spans that ended before this one began
            open_ends.pop()
        out[i] = len(open_ends)
        open_ends.append(start + spans[i]["dur"])
    return out


def plot_timeline(path: str, out_path: str):
    """Draw the timeline file `path` into `out_path` (format by its extension) and return the Figure."""
    check_image_path(out_path, "-o")
    names, tracks = read_timeline(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    t0 = min(e["ts"] for e in tracks[names[0]])
    cut_s = (t0 - min(e["ts"] for spans in tracks.values() for e in spans)) / 1e6
    phases = list(dict.fromkeys(e["name"] for t in names for e in sorted(tracks[t], key=lambda e: e["ts"])))
    colours = {name: f"C{i % 10}" if len(phases) <= 10 else _tab20(i) for i, name in enumerate(phases)}
    fig = Figure(figsize=(12, 1.2 + 0.7 * len(names)), layout="constrained")
    FigureCanvasAgg(fig)  # no display needed, no pyplot global state touched
    ax = fig.subplots()
    for row, track in enumerate(names):
        spans = tracks[track]
        level = depths(spans)
        height = 0.8 / (max(level) + 1)
        for e, d in zip(spans, level):  # row's top at row - 0.4; deeper spans below their parent
            start, end = max(e["ts"], t0), e["ts"] + e["dur"]
            if end > t0:
                ax.broken_barh([((start - t0) / 1e6, (end - start) / 1e6)], (row - 0.4 + d * height, height * 0.92),
                               facecolors=colours[e["name"]], edgecolor="none")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)  # the first track (the driver) on top
    ax.set_xlabel(f"seconds since the {names[0]}'s first span")
    ax.grid(axis="x", alpha=0.3)
    cut = f" ({cut_s:.1f} s before it left out: worker setup)" if cut_s > 0 else ""
    ax.set_title(f"phase timeline: {os.path.basename(path)}{cut}", fontsize=11)
    fig.legend([Patch(color=colours[p]) for p in phases], phases, loc="outside right center", fontsize="small")
    return save_figure(fig, out_path, dpi=100)


def _tab20(i: int):
    """tab20's dark shades first, then the light ones: neighbouring phases (step, testing) get distinct hues."""
    from matplotlib import colormaps

    return colormaps["tab20"]((2 * i) % 20 + (2 * i // 20) % 2)
