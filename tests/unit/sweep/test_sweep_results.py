"""`hybridrl compare SWEEP_DIR`: trials best first by the sweep's metric and mode, with their sampled values."""

import json

import pytest
import yaml

from hybridrl.cli import main
from hybridrl.sweep.results import read_sweep

M = "val-core/arithmetic/reward/mean@1"


def trial(folder, name, sampled, status, values=None, error=None):
    d = folder / name
    d.mkdir()
    (d / "trial.json").write_text(json.dumps({"sampled": sampled, "status": status, "error": error}))
    if values is not None:
        lines = [json.dumps({"step": step, M: v, "critic/score/mean": 0.5}) for step, v in enumerate(values)]
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def sweep_dir(tmp_path):
    spec = {"space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-6, 1e-5, 1e-4]}}, "metric": M, "mode": "max",
            "output": str(tmp_path)}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    lr = "actor_rollout_ref.actor.optim.lr"
    trial(tmp_path, "t_00000", {lr: 1e-6}, "finished", [0.2, 0.5, 0.4])  # best 0.5, final 0.4
    trial(tmp_path, "t_00001", {lr: 1e-5}, "finished", [0.2, 0.3, 0.7])  # best 0.7
    trial(tmp_path, "t_00002", {lr: 1e-4}, "running", [0.2, 0.1])  # cut at step 1 (a scheduler, or a kill)
    trial(tmp_path, "t_00003", {lr: -1.0}, "error", error="actor_rollout_ref.actor.optim.lr=-1.0 ...")
    return tmp_path


def test_trials_come_best_first_and_errors_last(sweep_dir):
    spec, rows = read_sweep(str(sweep_dir))
    assert [(r.trial, r.status, r.best, r.final, r.steps) for r in rows] == [
        ("t_00001", "finished", 0.7, 0.7, 2), ("t_00000", "finished", 0.5, 0.4, 2),
        ("t_00002", "stopped at step 1", 0.2, 0.1, 1), ("t_00003", "error", None, None, 0)]


def test_mode_min_reverses_the_order(sweep_dir):
    spec = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump({**spec, "mode": "min"}))
    _, rows = read_sweep(str(sweep_dir))
    assert [(r.trial, r.best) for r in rows] == [("t_00002", 0.1), ("t_00000", 0.2), ("t_00001", 0.2),
                                                 ("t_00003", None)]


def test_the_cli_prints_the_table_and_refuses_keys(sweep_dir, capsys, tmp_path_factory):
    out_json = tmp_path_factory.mktemp("j") / "table.json"
    assert main(["compare", str(sweep_dir), "--json", str(out_json)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["#", "trial", "status", "best", M, "(max)", "final", "steps",
                                "actor_rollout_ref.actor.optim.lr"]
    assert lines[1].split() == ["1", "t_00001", "finished", "0.7", "0.7", "2", "1e-05"]
    assert lines[-1] == "t_00003: actor_rollout_ref.actor.optim.lr=-1.0 ..."
    saved = json.loads(out_json.read_text())
    assert [t["trial"] for t in saved["trials"]] == ["t_00001", "t_00000", "t_00002", "t_00003"]
    assert main(["compare", str(sweep_dir), "--keys", "critic/score/mean"]) == 2
    assert "a sweep folder is compared alone" in capsys.readouterr().err


def test_a_trial_whose_run_is_live_is_running_not_stopped(sweep_dir):
    """A "running" trial.json is a live trial while a run holds its folder's lock (a sweep in progress), and a
    stopped one once nothing does (a scheduler stopped it, or the sweep was killed)."""
    from hybridrl.sweep.select import end_of
    from hybridrl.trainer.runlock import RunLock

    lock = RunLock(str(sweep_dir / "t_00002"))
    try:
        row = {r.trial: r for r in read_sweep(str(sweep_dir))[1]}["t_00002"]
        assert (row.status, end_of(row)) == ("running at step 1", "running")
    finally:
        lock.release()
    row = {r.trial: r for r in read_sweep(str(sweep_dir))[1]}["t_00002"]
    assert (row.status, end_of(row)) == ("stopped at step 1", "stopped")


def test_a_trial_without_a_readable_trial_json_is_listed_with_the_reason_never_dropped(sweep_dir):
    """Removed, cut JSON, a list by hand: the trial stays in the table (it was silently left out, or compare
    stopped on a traceback), its sampled values from Tune's params.json, its end "unknown" with why."""
    from hybridrl.sweep.select import end_of
    from hybridrl.sweep.trial import read_status

    lr = "actor_rollout_ref.actor.optim.lr"
    (sweep_dir / "t_00000" / "trial.json").unlink()
    (sweep_dir / "t_00000" / "params.json").write_text(json.dumps({lr: 1e-6}))
    (sweep_dir / "t_00001" / "trial.json").write_text('{"sampled": ')
    (sweep_dir / "t_00002" / "trial.json").write_text("[1]")
    trial(sweep_dir, "t_00004", {lr: 3e-6}, "finished")
    (sweep_dir / "t_00004" / "metrics.jsonl").write_bytes(b"\x7fELF\x02\x01")  # a finished run's metrics lost
    _, rows = read_sweep(str(sweep_dir))
    by = {r.trial: r for r in rows}
    assert [r.trial for r in rows] == ["t_00001", "t_00000", "t_00002", "t_00003", "t_00004"]
    assert (by["t_00000"].status, by["t_00000"].sampled, by["t_00000"].best) == ("unknown", {lr: 1e-6}, 0.5)
    assert by["t_00000"].error == "no trial.json: the trial never started, or the file was removed"
    assert by["t_00001"].error.startswith("trial.json: unreadable (") and by["t_00001"].sampled == {}
    assert by["t_00002"].error.startswith("trial.json: not a trial record")
    assert [end_of(by[t]) for t in ("t_00000", "t_00001", "t_00002")] == ["unknown"] * 3
    assert by["t_00004"].status == "finished" and "metrics.jsonl: no complete metric line" in by["t_00004"].error
    # the sweep's resume reads the same file: a damaged one runs the trial again instead of stopping the sweep
    assert [read_status(str(sweep_dir / t)) for t in ("t_00000", "t_00001", "t_00002", "t_00003")] == [
        None, None, None, "error"]
