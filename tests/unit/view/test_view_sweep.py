"""`hybridrl view SWEEP_DIR` through FastAPI's TestClient: the trials are the runs (named by trial id), and
/api/sweep lists them with their values, status and metric, filtered and sorted; bad filters are 400s that name
the key."""

import json
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from view_helpers import write_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
from sweep_folder import ADV, LR, M, write_sweep  # noqa: E402

from hybridrl.errors import ConfigError  # noqa: E402
from hybridrl.sweep.trial import write_trial_file  # noqa: E402
from hybridrl.view.app import build_app  # noqa: E402
from hybridrl.view.cli import open_runs  # noqa: E402


@pytest.fixture
def sweep_dir(tmp_path):
    return write_sweep(tmp_path / "sw")


def client(paths):
    runs, sweep = open_runs([str(p) for p in paths])
    return TestClient(build_app(runs, None, sweep), raise_server_exceptions=False)


def trials(c, **params):
    resp = c.get("/api/sweep", params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_the_trials_are_the_runs_and_the_table_lists_them(sweep_dir):
    c = client([sweep_dir])
    runs = c.get("/api/runs").json()
    assert runs["sweep"] is True
    assert [r["name"] for r in runs["runs"]] == ["t_00000", "t_00001", "t_00002"]  # t_00003 was refused: no run
    d = trials(c)
    assert (d["metric"], d["mode"], d["total"], d["shown"], d["sort"], d["desc"]) == (M, "max", 4, 4, "best", True)
    assert [(k["key"], k["axis"]) for k in d["keys"]] == [(LR, "log"), (ADV, "category"),
                                                         ("actor_rollout_ref.actor.clip_ratio", "linear")]
    # best first (mode max), each with the run that opens it
    assert [(t["trial"], t["best"], t["end"], t["run"]) for t in d["trials"]] == [
        ("t_00001", 0.7, "finished", 1), ("t_00000", 0.6, "finished", 0), ("t_00002", 0.3, "stopped", 2),
        ("t_00003", None, "error", None)]
    assert d["trials"][0]["sampled"] == {LR: 1e-5, ADV: "rloo", "actor_rollout_ref.actor.clip_ratio": 0.1}
    assert d["trials"][2]["status"] == "stopped at step 1"
    assert d["trials"][3]["error"].startswith("actor_rollout_ref.actor.optim.lr")


def test_filters_and_sort(sweep_dir):
    c = client([sweep_dir])
    d = trials(c, filters=json.dumps({LR: {"min": 5e-5}}), sort=LR)
    assert [t["trial"] for t in d["trials"]] == ["t_00000", "t_00003", "t_00002"]  # 1e-4, 5e-4, 1e-3
    assert (d["total"], d["shown"], d["sort"], d["desc"]) == (4, 3, LR, False)
    d = trials(c, filters=json.dumps({LR: {"min": 5e-5}, ADV: {"in": ["rloo"]}}))
    assert [t["trial"] for t in d["trials"]] == ["t_00003"]
    d = trials(c, sort="best", desc="false")
    assert [t["trial"] for t in d["trials"]] == ["t_00002", "t_00000", "t_00001", "t_00003"]


def test_bad_filters_are_400s_naming_the_key(sweep_dir):
    c = client([sweep_dir])
    for params, says in [({"filters": json.dumps({"lr": {"min": 1}})}, "filter on 'lr': not a swept key"),
                         ({"filters": "{lr"}, "filters: not JSON"),
                         ({"sort": "lr"}, "sort='lr': sort by one of trial, status, best, final, steps or a "
                                          "swept key")]:
        resp = c.get("/api/sweep", params=params)
        assert resp.status_code == 400 and says in resp.json()["error"], resp.text


def test_a_trial_that_starts_later_is_listed_without_a_run(sweep_dir):
    c = client([sweep_dir])
    write_trial_file(str(Path(sweep_dir) / "t_00004"), {LR: 2e-5, ADV: "grpo"}, "running")
    d = trials(c, sort="trial")
    assert [(t["trial"], t["run"]) for t in d["trials"]][-1] == ("t_00004", None)


def test_a_sweep_is_viewed_alone_and_runs_have_no_sweep_table(sweep_dir, tmp_path):
    run = write_run(tmp_path / "run")
    with pytest.raises(ConfigError, match="a sweep folder is viewed alone"):
        open_runs([sweep_dir, run])
    c = client([run])
    assert c.get("/api/runs").json()["sweep"] is False
    assert c.get("/api/sweep").status_code == 404
