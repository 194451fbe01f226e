"""`hybridrl plot --sweep SWEEP_DIR`: a panel per swept key (metric against value, ends drawn apart, the axis by
the key's kind) and the metric over steps with the best trial in colour; clear errors when there is nothing to
plot."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
from sweep_folder import ADV, CLIP, LR, M, write_sweep  # noqa: E402

from hybridrl.cli import main  # noqa: E402
from hybridrl.errors import DataError  # noqa: E402
from hybridrl.eval.plot_sweep import JITTER, sweep_figure  # noqa: E402


def offsets(ax, label):
    return [tuple(p) for c in ax.collections if c.get_label() == label for p in np.asarray(c.get_offsets())]


def test_the_panels_and_their_points(tmp_path):
    fig = sweep_figure(write_sweep(tmp_path / "sw"))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [f"{LR} (loguniform)", f"{ADV} (choice)", f"{CLIP} (uniform)",
                                                f"best trial t_00001: {M}"]
    lr, adv, clip, steps = shown
    assert (lr.get_xscale(), adv.get_xscale(), clip.get_xscale()) == ("log", "linear", "linear")
    assert [t.get_text() for t in adv.get_xticklabels()] == ["grpo", "rloo"]
    assert lr.get_ylabel() == f"best {M} (max)"
    # finished: (value, best); stopped early apart; the failed trial at its value on the bottom edge (axes y 0.03)
    assert offsets(adv, "finished") == [(0, 0.6), (1, 0.7)]
    assert offsets(adv, "stopped early") == [(JITTER, 0.3)]
    assert offsets(adv, "failed (no metric; at the bottom)") == [(1 + JITTER, 0.03)]
    assert offsets(clip, "finished") == [(0.2, 0.6), (0.1, 0.7)]
    # over steps: the best trial's own curve (0.3, 0.4, 0.7), the others in grey under it
    best = [line for line in steps.lines if line.get_label() == "best: t_00001"]
    assert [list(best[0].get_xdata()), list(best[0].get_ydata())] == [[0, 1, 2], [0.3, 0.4, 0.7]]
    assert len(steps.lines) == 3  # t_00000, t_00002 in grey; t_00003 never logged


def test_the_cli_writes_the_png(tmp_path, capsys):
    out = tmp_path / "out" / "sweep.png"
    assert main(["plot", "--sweep", write_sweep(tmp_path / "sw"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.strip() == f"wrote {out}"


def test_nothing_to_plot_is_a_clear_error(tmp_path, capsys):
    assert main(["plot", "--sweep", str(tmp_path), "-o", str(tmp_path / "a.png")]) == 2
    assert "not a sweep folder (no sweep.yaml in it); give a sweep's output folder" in capsys.readouterr().err
    folder = write_sweep(tmp_path / "failed", {"t_00000": ({LR: 1e-4, ADV: "grpo", CLIP: 0.2}, "error", None)})
    with pytest.raises(DataError, match=f"no trial has logged {M} yet \\(t_00000: error\\)"):
        sweep_figure(folder)
    assert main(["plot", "--sweep", folder, "runs/x"]) == 2
    assert "exactly one of them" in capsys.readouterr().err
    assert main(["plot", folder]) == 2
    assert f"{folder}: a sweep folder; plot it with hybridrl plot --sweep {folder}" in capsys.readouterr().err
