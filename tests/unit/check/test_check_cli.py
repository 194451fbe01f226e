"""`hybridrl check` as a command (hybridrl/check/cli.py), run in-process: --list says what each check proves,
bad input is a one-line error with exit code 2 before any check runs, --json writes the report, and the exit
code is 1 exactly when a check fails."""

from __future__ import annotations

import json

import pytest

from hybridrl.check.registry import ORDER
from hybridrl.cli import main


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    prefix = "hybridrl check: error: "
    assert err.startswith(prefix), err
    return err[len(prefix):].strip()


@pytest.fixture
def good(arith_data) -> list[str]:
    """A config `train` accepts: the bundled model on the arithmetic data."""
    return ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
            f"data.val_files=[{arith_data['val']}]"]


def test_list_names_every_check_with_what_it_proves(capsys):
    assert main(["check", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == list(ORDER) and len(ORDER) == 10
    assert all(len(line.split(": ", 1)[1]) > 40 for line in lines), lines  # a docstring, not a stub


def test_an_unknown_check_is_a_one_line_error(capsys, good):
    assert main(["check", "--only", "confg,data", *good]) == 2
    assert one_line_error(capsys) == ("--only: unknown check 'confg' (did you mean 'config'?); the checks are "
                                      + ", ".join(ORDER))


def test_a_missing_model_folder_says_what_the_check_needs(tmp_path, capsys, good):
    missing = tmp_path / "no_model"
    assert main(["check", *good, f"actor_rollout_ref.model.path={missing}"]) == 2
    message = one_line_error(capsys)
    assert message.startswith(f"{missing}: a shrunk twin of the model needs its folder's config.json and tokenizer "
                              "files; missing: the folder itself"), message
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text("{}")
    assert main(["check", *good, f"actor_rollout_ref.model.path={tmp_path / 'config_only'}"]) == 2
    assert "missing: the tokenizer files (one of tokenizer.json" in one_line_error(capsys)


def test_a_missing_launch_script_is_a_one_line_error(tmp_path, capsys):
    assert main(["check", str(tmp_path / "run.sh")]) == 2
    assert one_line_error(capsys).startswith(f"{tmp_path}/run.sh: no such launch script")


def test_json_report_and_exit_code_1_when_a_check_fails(tmp_path, capsys, good):
    out = tmp_path / "report.json"
    bad = ["data.train_batch_size=7", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]  # 4 does not divide 7
    assert main(["check", "--only", "config", "--json", str(out), *good, *bad]) == 1
    report = json.loads(out.read_text())
    assert report["passed"] is False and [c["name"] for c in report["checks"]] == ["config"]
    assert report["checks"][0]["status"] == "fail"
    assert any("ppo_mini_batch_size=4 does not divide data.train_batch_size=7" in d
               for d in report["checks"][0]["details"]), report["checks"][0]
    printed = capsys.readouterr().out
    assert "✗ config" in printed and "check FAILED" in printed


def test_exit_code_0_when_every_check_run_passes(tmp_path, capsys, good):
    out = tmp_path / "report.json"
    assert main(["check", "--only", "config,environment", "--json", str(out), *good]) == 0
    report = json.loads(out.read_text())
    assert report["passed"] is True
    assert [(c["name"], c["status"]) for c in report["checks"]] == [("config", "pass"), ("environment", "pass")]


def test_json_to_stdout_is_the_report_alone(capsys, good):
    assert main(["check", "--only", "environment", "--json", "-", *good]) == 0
    assert json.loads(capsys.readouterr().out)["checks"][0]["name"] == "environment"


def test_a_verl_launch_script_is_read_for_its_keys(tmp_path, capsys, good):
    script = tmp_path / "run.sh"
    script.write_text("set -x\nBS=${BS:-4}\npython3 -m verl.trainer.main_ppo \\\n    " + " \\\n    ".join(good)
                      + " \\\n    data.train_batch_size=$BS \\\n    actor_rollout_ref.actor.ppo_mini_batch_size=4 $@\n")
    out = tmp_path / "report.json"
    assert main(["check", "--only", "config", "--json", str(out), str(script), "data.train_batch_size=8"]) == 0
    report = json.loads(out.read_text())
    assert report["source"] == str(script) and report["overrides"][-1] == "data.train_batch_size=8"
    assert "data.train_batch_size=4" in report["overrides"]  # the script's, replaced by the command line's


def test_a_report_that_cannot_be_written_is_refused_before_any_check(capsys, good, tmp_path):
    assert main(["check", "--json", str(tmp_path), *good]) == 2  # a folder, not a file
    message = one_line_error(capsys)
    assert message.startswith(f"--json {tmp_path}: is a folder"), message
    assert not (tmp_path / "twins").exists() and list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_unreadable_training_rows_fail_data_once_and_the_runs_say_see_data(capsys, good, tmp_path):
    out = tmp_path / "r.json"
    items = [i for i in good if not i.startswith("data.train_files")] + [f"data.train_files=[{tmp_path / 'no.parquet'}]"]
    assert main(["check", "--json", str(out), "--only", "data,sampling,update,resume,export", *items]) == 1
    r = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert r["data"]["status"] == "fail" and "file not found" in r["data"]["summary"]
    for name in ("sampling", "update", "resume", "export"):
        assert r[name]["status"] == "n/a" and "see data" in r[name]["summary"], r[name]
