"""Reading run folders back: lenient lines, non-finite values, names, and the errors a user can fix."""

from __future__ import annotations

import json
import math

import pytest

from hybridrl.errors import DataError
from hybridrl.eval.runs import kl_key, load_run, load_runs, val_accuracy, val_keys


def write_run(folder, lines: list, experiment_name: str | None = None, tail: str = ""):
    """A run folder: `lines` as metrics.jsonl (dicts as JSON, strings as they are) plus `tail` unterminated."""
    folder.mkdir(parents=True)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (folder / "metrics.jsonl").write_text(text + tail)
    if experiment_name:
        (folder / "config.yaml").write_text(f"trainer:\n  project_name: p\n  experiment_name: {experiment_name}\n")
    return str(folder)


LINES = [
    {"step": 0, "val-core/math/reward/mean@4": 0.2, "val-core/gsm8k/reward/mean@4": 0.4,
     "val-core/math/reward/pass@2": 0.3},
    {"step": 1, "critic/score/mean": 0.1, "actor/entropy": 1.0, "actor/kl_loss": 0.01, "actor/ppo_kl": 0.5},
    "not json at all",
    [1, 2],  # JSON, but no record
    {"step": "two", "critic/score/mean": 9.0},  # no integer step
    {"step": 2, "critic/score/mean": 0.5, "actor/entropy": "nan", "timing_s/step": "inf", "note": "text",
     "val-core/math/reward/mean@4": 0.6, "val-core/gsm8k/reward/mean@4": 0.8, "val-core/math/reward/pass@2": 0.7},
]


def test_series_skip_bad_lines_and_keep_non_finite_values(tmp_path):
    run = load_run(write_run(tmp_path / "run", LINES, "exp", tail='{"step": 3, "critic/score/me'))
    assert run.name == "exp"
    assert run.series["critic/score/mean"] == [(1, 0.1), (2, 0.5)]  # "two" and the cut step 3 are gone
    assert run.series["actor/entropy"][0] == (1, 1.0) and math.isnan(run.series["actor/entropy"][1][1])
    assert run.series["timing_s/step"] == [(2, math.inf)]
    assert "note" not in run.series and "step" not in run.series
    assert run.series["val-core/math/reward/mean@4"] == [(0, 0.2), (2, 0.6)]
    assert run.last_step == 2


def test_a_step_logged_twice_keeps_the_later_line(tmp_path):
    run = load_run(write_run(tmp_path / "run", [{"step": 2, "a": 1.0}, {"step": 1, "a": 5.0}, {"step": 2, "a": 3.0}]))
    assert run.series["a"] == [(1, 5.0), (2, 3.0)]


def test_name_falls_back_to_the_folder_and_a_metrics_file_is_accepted(tmp_path):
    folder = write_run(tmp_path / "my-run", [{"step": 1, "a": 1.0}])
    assert load_run(folder).name == "my-run"
    direct = load_run(f"{folder}/metrics.jsonl")
    assert direct.name == "my-run" and direct.series == {"a": [(1, 1.0)]}


def test_shared_names_get_the_shortest_distinct_folder_tail(tmp_path):
    runs = load_runs([write_run(tmp_path / "seed1", [{"step": 1, "a": 1.0}], "exp"),
                      write_run(tmp_path / "seed2", [{"step": 1, "a": 2.0}], "exp"),
                      write_run(tmp_path / "x" / "run", [{"step": 1, "a": 3.0}], "other"),
                      write_run(tmp_path / "a" / "run", [{"step": 1, "a": 4.0}], "twin"),
                      write_run(tmp_path / "b" / "run", [{"step": 1, "a": 5.0}], "twin")])
    assert [r.name for r in runs] == ["exp (seed1)", "exp (seed2)", "other", "twin (a/run)", "twin (b/run)"]
    assert [r.series["a"][0][1] for r in runs] == [1.0, 2.0, 3.0, 4.0, 5.0]  # renaming kept each run's data


def test_the_same_run_twice_is_an_error(tmp_path):
    folder = write_run(tmp_path / "run", [{"step": 1, "a": 1.0}])
    with pytest.raises(DataError, match="more than once"):
        load_runs([folder, f"{folder}/metrics.jsonl"])


def test_a_folder_without_metrics_names_the_path_and_the_fix(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: no metrics.jsonl there; pass a run folder") as e:
        load_run(str(tmp_path / "empty"))
    assert str(tmp_path / "empty") in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DataError, match="no metrics.jsonl"):
        load_run(str(tmp_path / "missing"))
    cut_only = write_run(tmp_path / "cut", [], tail='{"step": 1, "a"')
    with pytest.raises(DataError, match="cut/metrics.jsonl: no complete metric line"):
        load_run(cut_only)


def test_kl_key_prefers_the_optimised_kl(tmp_path):
    def kl_of(keys: list[str]) -> str | None:
        folder = write_run(tmp_path / "-".join(keys or ["none"]).replace("/", "_"), [{"step": 1, "x": 0.0,
                                                                                   **dict.fromkeys(keys, 0.1)}])
        return kl_key(load_run(folder))

    assert kl_of(["actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty"]) == "actor/kl_loss"
    assert kl_of(["actor/ppo_kl", "actor/reward_kl_penalty"]) == "actor/reward_kl_penalty"
    assert kl_of(["actor/ppo_kl"]) == "actor/ppo_kl"
    assert kl_of([]) is None


def test_validation_keys_and_accuracy(tmp_path):
    run = load_run(write_run(tmp_path / "run", LINES))
    keys = ["val-core/math/reward/maj@4", "val-core/math/reward/pass@16", "val-core/math/reward/pass@2",
            "val-core/math/reward/std@4", "val-core/math/reward/mean@4", "val-core/aime/reward/mean@4",
            "val-aux/math/acc/mean@4", "critic/score/mean"]
    assert val_keys(keys) == ["val-core/aime/reward/mean@4", "val-core/math/reward/mean@4",
                              "val-core/math/reward/pass@2", "val-core/math/reward/pass@16",
                              "val-core/math/reward/maj@4"]
    assert val_accuracy(run) == [(0, pytest.approx(0.3)), (2, pytest.approx(0.7))]  # (.2+.4)/2, (.6+.8)/2; no pass@2


def test_bytes_that_are_not_utf8_are_a_skipped_line_not_a_traceback(tmp_path):
    """A metrics.jsonl with a corrupt line (e.g. a disk error) reads like one cut short by a kill."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_bytes(b'{"step": 1, "a": 1.0}\n\xff\xfe{"step": 2, "a": 2.0}\n'
                                           b'{"step": 3, "a": 3.0}\n')
    assert load_run(str(folder)).series["a"] == [(1, 1.0), (3, 3.0)]
