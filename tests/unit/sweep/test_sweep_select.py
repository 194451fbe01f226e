"""What `plot --sweep` and `view SWEEP_DIR` compute from a sweep folder: each key's axis, each trial's end, the
points of a key's panel, filters on the sampled values and the table's order (sweep/select.py)."""

import pytest
from sweep_folder import ADV, CLIP, LR, write_sweep

from hybridrl.eval.plot_sweep import JITTER, key_points
from hybridrl.sweep.results import read_sweep
from hybridrl.sweep.select import (FilterError, axis_of, best_row, end_of, keeps, parse_filters, sort_rows,
                                   swept_entries)
from hybridrl.sweep.space import Entry


@pytest.fixture
def sweep(tmp_path):
    spec, rows = read_sweep(write_sweep(tmp_path))
    return swept_entries(spec), rows


def names(rows):
    return [r.trial for r in rows]


def test_axis_by_kind():
    assert [axis_of(Entry("k", kind, v)) for kind, v in [("loguniform", (1e-5, 1e-3)), ("uniform", (0.1, 0.3)),
                                                          ("randint", (1, 4)), ("choice", ("a", "b")),
                                                          ("grid", (1e-6, 1e-5))]] == [
        "log", "linear", "linear", "category", "category"]


def test_best_per_trial_and_its_end(sweep):
    entries, rows = sweep
    assert [e.key for e in entries] == [LR, ADV, CLIP]
    # best by mode=max over steps 0.. (t_00001: 0.3, 0.4, 0.7 -> 0.7; t_00002 cut after 0.3, 0.1 -> 0.3)
    assert [(r.trial, r.best, end_of(r)) for r in rows] == [
        ("t_00001", 0.7, "finished"), ("t_00000", 0.6, "finished"), ("t_00002", 0.3, "stopped"),
        ("t_00003", None, "error")]
    assert best_row(rows).trial == "t_00001"
    assert best_row([rows[-1]]) is None  # only a failed trial: nothing is best


def test_key_points_on_a_category_axis_and_a_log_axis(sweep):
    entries, rows = sweep
    # grpo is category 0 (t_00000, then t_00002 one JITTER to its right), rloo category 1 (t_00001, t_00003)
    assert key_points(entries[1], rows) == {"finished": [(0, 0.6, "t_00000"), (1, 0.7, "t_00001")],
                                            "stopped": [(JITTER, 0.3, "t_00002")], "running": [],
                                            "error": [(1 + JITTER, None, "t_00003")], "unknown": []}
    assert key_points(entries[0], rows) == {"finished": [(1e-4, 0.6, "t_00000"), (1e-5, 0.7, "t_00001")],
                                            "stopped": [(1e-3, 0.3, "t_00002")], "running": [],
                                            "error": [(5e-4, None, "t_00003")], "unknown": []}


def test_filters_by_range_and_by_choice(sweep):
    entries, rows = sweep

    def kept(raw):
        flt = parse_filters(raw, entries)
        return sorted(r.trial for r in rows if keeps(r, flt))

    assert kept({LR: {"min": 5e-5}}) == ["t_00000", "t_00002", "t_00003"]  # 1e-4, 1e-3, 5e-4
    assert kept({LR: {"min": 5e-5}, ADV: {"in": ["rloo"]}}) == ["t_00003"]
    assert kept({CLIP: {"min": 0.1, "max": 0.2}}) == ["t_00000", "t_00001"]  # both bounds included
    assert kept({CLIP: {"max": None}}) == ["t_00000", "t_00001", "t_00002", "t_00003"]
    assert kept({ADV: {"in": []}}) == []


def test_a_bad_filter_names_the_key_and_the_fix(sweep):
    entries, _ = sweep
    with pytest.raises(FilterError, match=r"'actor_rollout_ref.actor.lr': not a swept key; the sweep's keys are "
                                          r"actor_rollout_ref.actor.optim.lr, algorithm.adv_estimator"):
        parse_filters({"actor_rollout_ref.actor.lr": {"min": 1}}, entries)
    with pytest.raises(FilterError, match=r"give \{\"min\": lo, \"max\": hi\} or \{\"in\": \[values\]\}"):
        parse_filters({LR: {"above": 1}}, entries)
    with pytest.raises(FilterError, match="min and max are numbers"):
        parse_filters({LR: {"min": "1e-4"}}, entries)


def test_sort_keeps_trials_without_a_value_last(sweep):
    _, rows = sweep
    assert names(sort_rows(rows, LR)) == ["t_00001", "t_00000", "t_00003", "t_00002"]  # 1e-5, 1e-4, 5e-4, 1e-3
    assert names(sort_rows(rows, "best")) == ["t_00002", "t_00000", "t_00001", "t_00003"]  # 0.3, 0.6, 0.7, none
    assert names(sort_rows(rows, "best", descending=True)) == ["t_00001", "t_00000", "t_00002", "t_00003"]
    assert names(sort_rows(rows, ADV)) == ["t_00000", "t_00002", "t_00001", "t_00003"]  # grpo, grpo, rloo, rloo
    assert names(sort_rows(rows, "steps", descending=True))[:2] == ["t_00001", "t_00000"]  # 2, 2, then 1, 0
