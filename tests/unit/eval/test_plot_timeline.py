"""`hybridrl plot --timeline`: a row per process in the recorder's order, a bar per span, nested spans below
their parent, one-line errors."""

import json

import pytest

from hybridrl.cli import main
from hybridrl.eval.plot_timeline import depths, plot_timeline, read_timeline

pytest.importorskip("matplotlib")


def meta(pid, name, index):
    return [{"name": "process_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": pid, "args": {"sort_index": index}}]


def span(pid, name, ts, dur):
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": pid, "args": {}}


def write_trace(path):
    events = (meta(30, "actor rank 1", 1) + meta(20, "actor rank 0", 0) + meta(10, "driver", -1)
              + [span(10, "step", 0, 1000), span(10, "gen", 0, 400), span(10, "update_actor", 500, 400),
                 span(20, "generate", 10, 380), span(30, "generate", 10, 390), span(20, "policy_update", 510, 380),
                 span(30, "policy_update", 510, 385), span(20, "setup", -3_000_000, 2_999_000),
                 span(30, "setup", -3_000_000, 3_000_100)])
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_nesting_depth_within_a_track():
    spans = [span(1, "gen", 0, 400), span(1, "step", 0, 1000), span(1, "update", 500, 400), span(1, "after", 1000, 5)]
    assert depths(spans) == [1, 0, 1, 0]  # a span starting as another ends is not inside it


def test_tracks_in_the_recorders_order(tmp_path):
    names, tracks = read_timeline(write_trace(tmp_path / "t.json"))
    assert names == ["driver", "actor rank 0", "actor rank 1"]
    assert [e["name"] for e in tracks["actor rank 1"]] == ["generate", "policy_update", "setup"]


def test_the_image_has_a_row_per_process_and_a_bar_per_span(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.json")
    fig = plot_timeline(trace, str(tmp_path / "out" / "t.png"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["driver", "actor rank 0", "actor rank 1"]
    assert len(ax.collections) == 8  # the setup that ended before the driver's first span is left out
    assert "(3.0 s before it left out: worker setup)" in ax.get_title()
    assert ax.collections[-1].get_paths()[0].get_extents().x1 == pytest.approx(100e-6)  # the other is clipped at 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["step", "gen", "update_actor", "setup", "generate", "policy_update"]  # by track, then by time
    assert main(["plot", "--timeline", trace, "-o", str(tmp_path / "cli.png")]) == 0
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["plot", "--timeline", str(tmp_path / "none.json")]) == 2
    assert "file not found" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["plot", "--timeline", str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.png")]) == 2
    assert "not a Chrome-trace JSON with traceEvents" in capsys.readouterr().err
    assert main(["plot"]) == 2 and "exactly one of them" in capsys.readouterr().err
    assert main(["plot", "run", "--timeline", "t.json"]) == 2
