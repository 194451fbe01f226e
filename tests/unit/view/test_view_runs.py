"""RunFolder and the generation grouping: what a run leaves, read leniently; bad folders are messages."""

import json
import os

import pytest
from view_helpers import write_dump, write_run

from hybridrl.view.generations import Filter, StepCache, find, group_rows, page
from hybridrl.view.runs import RunFolder, ViewError, load_folders


def test_metrics_are_columnar_and_a_client_gets_only_new_lines_by_offset(tmp_path):
    run = RunFolder(write_run(tmp_path, steps=2))
    first = run.metrics_since(0)
    assert first["steps"] == [0, 1, 2]
    assert first["series"]["critic/score/mean"] == [None, 0.1, 0.2]
    assert first["series"]["val-core/arith/reward/mean@1"] == [0.25, None, None]
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "critic/score/mean": "nan"}) + "\n" + '{"step": 4, "critic/sc')
    new = run.metrics_since(first["offset"])
    assert new["steps"] == [3] and new["series"] == {"critic/score/mean": ["nan"]} and not new["reset"]
    assert run.metrics_since(new["offset"])["steps"] == []  # the half-written step 4 waits for its newline


def test_a_rewritten_metrics_file_says_reset_and_corrupt_lines_are_counted(tmp_path):
    run = RunFolder(write_run(tmp_path, steps=3))
    offset = run.metrics_since(0)["offset"]
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "x": 1}\nnot json\n[1, 2]\n')
    again = run.metrics_since(offset)
    assert again["reset"] and again["steps"] == [0] and again["skipped"] == 2


@pytest.mark.parametrize("make, problem", [
    (lambda p: None, "no such folder"),
    (lambda p: os.makedirs(p), "no metrics.jsonl"),
])
def test_bad_folders_become_problems_not_exceptions(tmp_path, make, problem):
    path = str(tmp_path / "r")
    make(path)
    run = RunFolder(path)
    assert any(problem in p for p in run.problems)
    assert run.name == "r" and run.metrics_since(0)["steps"] == [] and run.checkpoints() == []
    with pytest.raises(ViewError, match="no rollout generations"):
        run.source("rollout")


def test_a_broken_config_and_a_missing_dump_folder_are_reported(tmp_path):
    folder = write_run(tmp_path / "a")
    (tmp_path / "a" / "config.yaml").write_text("trainer: [unclosed\n")
    assert any("config.yaml: cannot read it" in p for p in RunFolder(folder).problems)
    folder = write_run(tmp_path / "b")
    (tmp_path / "b" / "config.yaml").write_text("trainer:\n  validation_data_dir: /nowhere/val\n")
    assert any("/nowhere/val: no such folder" in p for p in RunFolder(folder).problems)


def test_dump_folders_come_from_the_config_relative_to_the_run_and_checkpoints_are_listed(tmp_path):
    run = RunFolder(write_run(tmp_path, dump_steps=(2, 10, 1)))
    assert run.source("rollout").steps() == [1, 2, 10]
    os.makedirs(tmp_path / "global_step_2" / "actor")
    (tmp_path / "global_step_2" / "checkpoint.json").write_text("{}")
    os.makedirs(tmp_path / "global_step_4" / "actor")  # being written: no manifest yet
    assert run.checkpoints() == [{"step": 2, "whole": True, "roles": ["actor"]},
                                 {"step": 4, "whole": False, "roles": ["actor"]}]


def test_one_file_generations_are_split_by_step_from_each_lines_prefix(tmp_path):
    folder = write_run(tmp_path)
    path = tmp_path / "val_generations.jsonl"
    write_dump(str(path), 0, 2, 1)
    with open(path, "a") as f:
        f.write(json.dumps({"step": 5, "input": "q", "output": "a", "score": 1.0}) + "\n")
    src = RunFolder(folder).source("val_generations")
    assert src.steps() == [0, 5]
    assert src.step_lines(5)[1] == [2]


def test_same_named_runs_are_told_apart(tmp_path):
    runs = load_folders([write_run(tmp_path / "seed1"), write_run(tmp_path / "seed2")])
    assert [r.name for r in runs] == ["exp (seed1 #1)", "exp (seed2 #2)"]


def test_groups_filters_and_the_same_prompt_at_another_step(tmp_path):
    run = RunFolder(write_run(tmp_path, prompts=3, n=2, dump_steps=(1, 2)))
    cache = StepCache()
    groups, skipped = cache.groups(run.name, run.source("rollout"), 1)
    assert skipped == 0 and [len(g.rows) for g in groups] == [2, 2, 2]
    assert page(groups, Filter(), 0, 2)["total"] == 3 and len(page(groups, Filter(), 0, 2)["prompts"]) == 2
    assert [p["i"] for p in page(groups, Filter(data_source="gsm8k"), 0, 10)["prompts"]] == [1]
    assert [p["i"] for p in page(groups, Filter(query="WHAT IS 2+2"), 0, 10)["prompts"]] == [2]
    assert [p["i"] for p in page(groups, Filter(query="answer 2"), 0, 10)["prompts"]] == [1, 2]  # responses: p + j
    assert page(groups, Filter(min_length=5), 0, 10)["total"] == 0  # lengths are 3 and 4
    assert page(groups, Filter(min_score=1, max_length=3), 0, 10)["total"] == 3
    summary = page(groups, Filter(), 0, 1)["prompts"][0]
    assert summary["score_mean"] == 0.5 and summary["length_mean"] == 3.5 and summary["n"] == 2
    later, _ = cache.groups(run.name, run.source("rollout"), 2)
    assert find(later, groups[2].key) == 2 and find(later, "nope") is None
    with pytest.raises(ViewError, match="no rollout generations at step 7"):
        cache.groups(run.name, run.source("rollout"), 7)


def test_a_step_still_being_written_is_read_again_and_bad_rows_are_skipped(tmp_path):
    run = RunFolder(write_run(tmp_path, prompts=1, n=2, dump_steps=(1,)))
    cache = StepCache()
    assert len(cache.groups(run.name, run.source("rollout"), 1)[0][0].rows) == 2
    with open(tmp_path / "rollouts" / "1.jsonl", "a") as f:
        f.write("garbage\n" + json.dumps({"input": "What is 0+0?", "output": "x"}) + "\n" + '{"input": "What')
    groups, skipped = cache.groups(run.name, run.source("rollout"), 1)
    assert skipped == 1 and len(groups[0].rows) == 3


def test_consecutive_rows_with_one_prompt_form_a_group():
    rows = [{"input": "a"}, {"input": "a"}, {"input": "b"}, {"input": "a"}]
    assert [len(g.rows) for g in group_rows(rows)] == [2, 1, 1]
