"""`plot_runs` and `hybridrl plot`: a real PNG, and in each panel the lines and data expected."""

from __future__ import annotations

import json
import math
import sys

import pytest

from hybridrl.cli import main
from hybridrl.errors import HybridRLError
from hybridrl.eval.plot import PANELS, VAL_LABEL, plot_runs
from hybridrl.eval.runs import load_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
A = [  # validated at steps 0 and 2 on two sources, a KL loss, entropy NaN at step 2
    {"step": 0, "val-core/math/reward/mean@4": 0.2, "val-core/gsm8k/reward/mean@4": 0.4},
    {"step": 1, "critic/score/mean": 0.1, "actor/entropy": 1.0, "actor/kl_loss": 0.01, "actor/ppo_kl": 0.5,
     "timing_s/step": 3.0, "response_length/mean": 10.0},
    {"step": 2, "critic/score/mean": 0.5, "actor/entropy": "nan", "actor/kl_loss": 0.03, "actor/ppo_kl": 0.4,
     "timing_s/step": 2.0, "response_length/mean": 12.0, "val-core/math/reward/mean@4": 0.6,
     "val-core/gsm8k/reward/mean@4": 0.8},
]
B = [  # no validation, no KL loss, no response length
    {"step": 1, "critic/score/mean": 0.2, "actor/ppo_kl": 0.004, "timing_s/step": 1.5, "actor/entropy": 0.9},
    {"step": 2, "critic/score/mean": 0.4, "actor/ppo_kl": 0.002, "timing_s/step": 1.0, "actor/entropy": 0.7},
]


def write_run(folder, lines: list[dict]) -> str:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 3, "cri')
    return str(folder)


def panels(fig) -> dict[str, object]:
    """Axes by panel name (the title before ': ')."""
    return {ax.get_title().split(": ")[0]: ax for ax in fig.axes}


def lines(ax) -> dict[str, list[tuple[float, float]]]:
    return {line.get_label(): [tuple(p) for p in line.get_xydata().tolist()] for line in ax.lines}


def assert_png(path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_each_panel_gets_the_runs_that_logged_it(tmp_path):
    runs = load_runs([write_run(tmp_path / "a", A), write_run(tmp_path / "b", B)])
    fig = plot_runs(runs, str(tmp_path / "out" / "curves.png"))  # the missing folder is made
    assert_png(tmp_path / "out" / "curves.png")
    by_name = panels(fig)
    assert list(by_name) == list(PANELS)
    assert [ax.get_title() for ax in fig.axes] == [
        "reward: critic/score/mean", f"validation accuracy: {VAL_LABEL}", "KL: metric per run, see legend",
        "entropy: actor/entropy", "response length: response_length/mean", "step time (s): timing_s/step"]
    assert lines(by_name["reward"]) == {"a": [(1, 0.1), (2, 0.5)], "b": [(1, 0.2), (2, 0.4)]}
    val = lines(by_name["validation accuracy"])
    assert list(val) == ["a"] and val["a"] == [(0, pytest.approx(0.3)), (2, pytest.approx(0.7))]  # mean of sources
    assert by_name["validation accuracy"].lines[0].get_marker() == "o"  # sparse points stay visible
    assert lines(by_name["KL"]) == {"a": [(1, 0.01), (2, 0.03)], "b": [(1, 0.004), (2, 0.002)]}  # a's KL loss
    assert [t.get_text() for t in by_name["KL"].get_legend().get_texts()] == ["actor/kl_loss", "actor/ppo_kl"]
    entropy = lines(by_name["entropy"])
    assert entropy["a"][0] == (1, 1.0) and math.isnan(entropy["a"][1][1]) and entropy["b"] == [(1, 0.9), (2, 0.7)]
    assert lines(by_name["response length"]) == {"a": [(1, 10.0), (2, 12.0)]}
    assert lines(by_name["step time (s)"]) == {"a": [(1, 3.0), (2, 2.0)], "b": [(1, 1.5), (2, 1.0)]}
    for name in ("a", "b"):  # one colour per run in every panel
        colours = {line.get_color() for ax in fig.axes for line in ax.lines if line.get_label() == name}
        assert len(colours) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]


def test_a_panel_no_run_logged_says_so(tmp_path):
    fig = plot_runs(load_runs([write_run(tmp_path / "b", B)]), str(tmp_path / "curves.png"))
    by_name = panels(fig)
    for panel in ("validation accuracy", "response length"):
        ax = by_name[panel]
        assert ax.get_title() == f"{panel}: not logged" and not ax.lines
        assert [t.get_text() for t in ax.texts] == ["not logged"]
    assert by_name["KL"].get_title() == "KL: actor/ppo_kl" and by_name["KL"].get_legend() is None
    assert_png(tmp_path / "curves.png")


def test_an_unknown_image_type_or_no_matplotlib_is_a_user_error(tmp_path, monkeypatch):
    runs = load_runs([write_run(tmp_path / "b", B)])
    with pytest.raises(HybridRLError, match=r"curves\.xyz: cannot write a '\.xyz' image"):
        plot_runs(runs, str(tmp_path / "curves.xyz"))
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # importing it now raises ImportError
    with pytest.raises(HybridRLError, match=r"pip install matplotlib \(or pip install 'hybridrl\[plot\]'\)"):
        plot_runs(runs, str(tmp_path / "curves.png"))


def test_cli_plot(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", A), write_run(tmp_path / "b", B)
    assert main(["plot", a, b, "-o", str(tmp_path / "c.png")]) == 0
    assert_png(tmp_path / "c.png")
    assert capsys.readouterr().out == f"wrote {tmp_path / 'c.png'}\n"
    assert main(["plot", a, str(tmp_path / "nowhere")]) == 2
    assert "hybridrl plot: error: " in capsys.readouterr().err
