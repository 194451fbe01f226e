"""RunFolder and the generation grouping: what a run leaves, read leniently; bad folders are messages."""

import json
import os
import shutil

import pytest
from view_helpers import write_dump, write_run

from hybridrl.view.generations import Filter, StepCache, find, group_rows, page
from hybridrl.view.runs import RunFolder, ViewError, load_folders


def test_metrics_are_columnar_and_only_appended_lines_are_parsed(tmp_path):
    run = RunFolder(write_run(tmp_path, steps=2))
    first = run.metrics_table().select()
    assert first["steps"] == [0, 1, 2] and first["rows"] == 3
    assert first["series"]["critic/score/mean"] == [None, 0.1, 0.2]
    assert first["series"]["val-core/arith/reward/mean@1"] == [0.25, None, None]
    table = run.metrics_table()
    kept = table.series["critic/score/mean"]
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "critic/score/mean": "nan"}) + "\n" + '{"step": 4, "critic/sc')
    new = run.metrics_table().select(since=3)
    assert new["steps"] == [3] and new["series"]["critic/score/mean"] == ["nan"]
    assert new["series"]["val-core/arith/reward/mean@1"] == [None]
    assert run.metrics_table().series["critic/score/mean"] is kept  # extended in place, not parsed again
    assert run.metrics_table().select(since=4)["steps"] == []  # the half-written step 4 waits for its newline


def test_a_selection_ships_only_the_asked_sections_and_keys_but_every_name(tmp_path):
    run = RunFolder(write_run(tmp_path, steps=3))
    names = run.metrics_table().select()["names"]
    some = run.metrics_table().select(sections=["val-core"], keys=["critic/score/mean"], upto=2)
    assert set(some["series"]) == {"val-core/arith/reward/mean@1", "critic/score/mean"} and len(names) > 2
    assert some["names"] == names and some["steps"] == [0, 1] and some["rows"] == 4
    assert run.metrics_table().select(sections=[])["series"] == {}


def test_a_rewritten_metrics_file_starts_a_new_generation_and_corrupt_lines_are_counted(tmp_path):
    run = RunFolder(write_run(tmp_path, steps=3))
    gen = run.metrics_table().generation
    run.summary()  # refreshes the same index first: the table must still notice the rewrite
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "x": 1}\nnot json\n[1, 2]\n')
    run.summary()
    again = run.metrics_table().select()
    assert again["generation"] != gen and again["steps"] == [0] and again["skipped"] == 2
    assert again["series"] == {"x": [1]}


@pytest.mark.parametrize("make, problem", [
    (lambda p: None, "no such folder"),
    (lambda p: os.makedirs(p), "no metrics.jsonl"),
])
def test_bad_folders_become_problems_not_exceptions(tmp_path, make, problem):
    path = str(tmp_path / "r")
    make(path)
    run = RunFolder(path)
    assert any(problem in p for p in run.problems)
    assert run.name == "r" and run.metrics_table().steps == [] and run.checkpoints() == []
    with pytest.raises(ViewError, match="no rollout generations"):
        run.source("rollout")


def test_a_file_given_as_a_run_is_named_as_given_and_the_run_folder_proposed(tmp_path, monkeypatch):
    write_run(tmp_path / "r")
    monkeypatch.chdir(tmp_path)
    run = RunFolder("r/metrics.jsonl")
    assert run.problems == ["r/metrics.jsonl: a file, not a run folder; give the run folder, the one holding "
                            "metrics.jsonl: `hybridrl view r`"]
    assert run.name == "metrics.jsonl"  # not the folder's experiment_name: the user did not name the folder
    assert run.metrics_table().steps == [] and run.sources == {} and run.checkpoints() == []  # nothing read


def test_a_file_outside_any_run_says_which_folder_to_give(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    run = RunFolder(str(tmp_path / "notes.txt"))
    assert run.problems == [f"{tmp_path / 'notes.txt'}: a file, not a run folder; give the run folder, the one "
                            "holding metrics.jsonl (the run's trainer.default_local_dir)"]
    assert run.name == "notes.txt" and run.summary()["metric_lines"] == 0


def test_a_run_folder_deleted_while_served_is_marked_gone(tmp_path):
    run = RunFolder(write_run(tmp_path / "r", steps=3))
    assert run.metrics_table().steps == [0, 1, 2, 3] and run.summary()["gone"] is False
    shutil.rmtree(tmp_path / "r")
    summary = run.summary()
    assert summary["gone"] is True and summary["metric_lines"] == 4  # the last counts, not an empty run
    assert summary["problems"] == [f"{tmp_path / 'r'}: the run folder was deleted or moved while the viewer ran; "
                                   "what the page has stays as last read, nothing more is read until the folder "
                                   "is back (restart `hybridrl view` without it to drop it)"]
    with pytest.raises(ViewError, match="the run folder was deleted or moved"):
        run.metrics_table()
    with pytest.raises(ViewError, match="the run folder was deleted or moved"):
        run.source("rollout")
    write_run(tmp_path / "r", steps=1)  # back (a new run in its place): read again
    assert run.summary()["gone"] is False and run.metrics_table().steps == [0, 1]


def test_a_folder_missing_from_the_start_is_not_gone_but_may_still_come(tmp_path):
    run = RunFolder(str(tmp_path / "later"))
    assert run.summary()["gone"] is False and run.metrics_table().steps == []
    write_run(tmp_path / "later", steps=2)
    assert run.metrics_table().steps == [0, 1, 2]


def test_a_dump_folder_deleted_while_served_says_so(tmp_path):
    run = RunFolder(write_run(tmp_path / "r", dump_steps=(1,)))
    assert run.source("rollout").steps() == [1]
    shutil.rmtree(tmp_path / "r" / "rollouts")
    with pytest.raises(ViewError, match=r"rollouts: the rollout dump was deleted or moved while the viewer ran"):
        run.source("rollout").steps()


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


def test_the_steps_that_sampled_a_prompt_are_found_in_both_dump_kinds(tmp_path):
    folder = write_run(tmp_path / "r", dump_steps=(1, 2, 3))
    with open(os.path.join(folder, "rollouts", "2.jsonl"), "w") as f:  # step 2 sampled other prompts only
        f.write(json.dumps({"step": 2, "input": "What is 7+7?", "output": "14"}) + "\n")
    with open(os.path.join(folder, "rollouts", "3.jsonl"), "a") as f:  # written by another tool: compact, unescaped
        f.write(json.dumps({"step": 3, "input": "Was ist 2×2?", "output": "4"}, ensure_ascii=False,
                           separators=(",", ":")) + "\n")
    rollouts = RunFolder(folder).source("rollout")
    assert rollouts.steps_with("What is 1+1?") == [1, 3] and rollouts.steps_with("What is 7+7?") == [2]
    assert rollouts.steps_with("Was ist 2×2?") == [3] and rollouts.steps_with("What is 1+") == []  # whole prompts only
    with open(os.path.join(folder, "val_generations.jsonl"), "w") as f:
        for step, prompt in ((0, "a"), (0, "b"), (5, "b"), (10, "a")):
            f.write(json.dumps({"step": step, "input": prompt, "output": ""}) + "\n")
    assert RunFolder(folder).source("val_generations").steps_with("b") == [0, 5]
