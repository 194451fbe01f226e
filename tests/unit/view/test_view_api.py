"""The viewer's HTTP API through FastAPI's TestClient: answers, live updates, messages instead of 500s, auth."""

import json
import shutil

import pytest
from fastapi.testclient import TestClient
from view_helpers import write_run

from hybridrl.eval.compare import compare_table
from hybridrl.eval.runs import load_runs
from hybridrl.view.app import build_app
from hybridrl.view.runs import load_folders

KEY = "s3cret"


def client(paths, api_key=None):
    # raise_server_exceptions=False: a bug is answered as the page would see it (a 500), so the tests below
    # that assert "never 500" can fail
    return TestClient(build_app(load_folders([str(p) for p in paths]), api_key), raise_server_exceptions=False)


@pytest.fixture
def two_runs(tmp_path):
    a = write_run(tmp_path / "a", steps=3, name="A")
    b = write_run(tmp_path / "b", steps=5, name="B")
    return a, b


def test_runs_metrics_and_live_updates(two_runs):
    c = client(two_runs)
    runs = c.get("/api/runs").json()
    assert [r["name"] for r in runs["runs"]] == ["A", "B"] and runs["plotly"] is True
    assert runs["runs"][0]["generations"]["rollout"].endswith("rollouts")
    first = c.get("/api/metrics", params={"run": 1, "sections": "critic"}).json()
    assert first["steps"] == [0, 1, 2, 3, 4, 5] and set(first["series"]) == {"critic/score/mean"}
    assert "val-core/arith/reward/mean@1" in first["names"]  # the other sections' names come, not their series
    assert len(c.get("/api/metrics", params={"run": 1}).json()["series"]) == len(first["names"])  # none named: all
    with open(f"{two_runs[1]}/metrics.jsonl", "a") as f:  # the run trains on
        f.write(json.dumps({"step": 6, "critic/score/mean": 0.6}) + "\n")
    new = c.get("/api/metrics", params={"run": 1, "since": 6, "gen": first["generation"], "sections": "critic"}).json()
    assert new["steps"] == [6] and new["series"] == {"critic/score/mean": [0.6]} and not new["reset"]
    # a section opened later: its columns up to the rows the page has
    late = c.get("/api/metrics", params={"run": 1, "upto": 6, "sections": "val-core"}).json()
    assert late["steps"] == first["steps"] and list(late["series"]) == ["val-core/arith/reward/mean@1"]
    open(f"{two_runs[1]}/metrics.jsonl", "w").write('{"step": 0, "critic/score/mean": 0.5}\n')  # a resumed run rewrote it
    again = c.get("/api/metrics", params={"run": 1, "since": 7, "gen": first["generation"], "sections": "critic"}).json()
    assert again["reset"] and again["steps"] == [0] and again["series"] == {"critic/score/mean": [0.5]}


def test_prompts_page_filter_and_one_prompt_at_two_steps(two_runs):
    c = client(two_runs)
    assert c.get("/api/steps", params={"run": 0, "kind": "rollout"}).json() == {"steps": [1, 2]}
    page = c.get("/api/prompts", params={"run": 0, "kind": "rollout", "step": 1, "limit": 1}).json()
    assert page["total"] == 2 and len(page["prompts"]) == 1 and page["data_sources"] == ["arith", "gsm8k"]
    only = c.get("/api/prompts", params={"run": 0, "kind": "rollout", "step": 1, "source": "gsm8k"}).json()
    assert [p["i"] for p in only["prompts"]] == [1]
    one = c.get("/api/prompt", params={"run": 0, "kind": "rollout", "step": 1, "i": 1}).json()
    assert one["input"] == "What is 1+1?" and [r["score"] for r in one["rows"]] == [1.0, 0.0]
    other = c.get("/api/prompt", params={"run": 0, "kind": "rollout", "step": 2, "key": one["key"]}).json()
    assert other["step"] == 2 and other["input"] == one["input"]
    assert c.get("/api/prompt_steps", params={"run": 0, "kind": "rollout", "step": 1, "i": 1}).json() == {"steps": [1, 2]}
    assert c.get("/api/prompt_steps", params={"run": 0, "kind": "rollout", "step": 1, "i": 5}).status_code == 404
    missing = c.get("/api/prompt", params={"run": 0, "kind": "rollout", "step": 2, "key": "0000"})
    assert missing.status_code == 200 and missing.json() == {
        "found": False, "step": 2, "message": "this prompt is not among step 2's 2 prompts"}


def test_compare_is_hybridrl_compare(two_runs):
    got = client(two_runs).get("/api/compare", params={"a": 0, "b": 1}).json()
    want = compare_table(load_runs(list(two_runs)))
    assert [r["metric"] for r in got["rows"]] == [r.metric for r in want]
    assert [r["final"] for r in got["rows"]] == [r.final for r in want]
    assert [r["best"] for r in got["rows"]] == [r.best for r in want]
    assert got["runs"] == ["A", "B"]


def test_bad_folders_and_half_written_files_are_messages_never_500(tmp_path):
    good = write_run(tmp_path / "good")
    with open(f"{good}/rollouts/1.jsonl", "a") as f:
        f.write('{"step": 1, "input": "cut sh')
    with open(f"{good}/metrics.jsonl", "a") as f:
        f.write('{"step": 4, "critic/sc')
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "notjson").mkdir()
    (tmp_path / "notjson" / "metrics.jsonl").write_bytes(b"\xff\xfe garbage\n{\n")
    c = client([good, empty, tmp_path / "missing", tmp_path / "notjson"])
    runs = c.get("/api/runs").json()["runs"]
    assert [bool(r["problems"]) for r in runs] == [False, True, True, False]
    assert c.get("/api/metrics", params={"run": 0}).json()["steps"] == [0, 1, 2, 3]
    assert c.get("/api/metrics", params={"run": 3}).json()["skipped"] == 2
    responses = [
        c.get("/api/prompts", params={"run": 0, "kind": "rollout", "step": 1}),
        c.get("/api/metrics", params={"run": 1}), c.get("/api/metrics", params={"run": 2}),
        c.get("/api/steps", params={"run": 1, "kind": "rollout"}),
        c.get("/api/prompts", params={"run": 0, "kind": "rollout", "step": 99}),
        c.get("/api/prompt", params={"run": 0, "kind": "rollout", "step": 1, "i": 50}),
        c.get("/api/prompts", params={"run": 9, "kind": "rollout", "step": 1}),
        c.get("/api/prompts", params={"run": "x", "kind": "rollout", "step": 1}),
        c.get("/api/compare", params={"a": 0, "b": 1}), c.get("/api/compare", params={"a": 0, "b": 3}),
        c.get("/api/nothing"), c.get("/static/../app.py"),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 404, 404, 404, 404, 400, 404, 404, 404, 404]
    assert all(r.json().get("error") or r.status_code == 200 for r in responses)
    assert "no rollout generations at step 99" in responses[4].json()["error"]
    assert responses[0].json()["total"] == 2  # the cut-short row is not read


def test_a_run_deleted_while_served_is_a_message_not_an_empty_run(two_runs):
    c = client(two_runs)
    assert c.get("/api/metrics", params={"run": 0}).json()["steps"] == [0, 1, 2, 3]
    shutil.rmtree(two_runs[0])
    metrics = c.get("/api/metrics", params={"run": 0})
    assert metrics.status_code == 404 and "the run folder was deleted or moved" in metrics.json()["error"]
    assert c.get("/api/steps", params={"run": 0, "kind": "rollout"}).status_code == 404
    listed = c.get("/api/runs").json()["runs"]
    assert listed[0]["gone"] and any("deleted or moved" in p for p in listed[0]["problems"])
    assert not listed[1]["gone"] and c.get("/api/metrics", params={"run": 1}).status_code == 200


def test_a_file_given_as_a_run_is_listed_with_its_problem(two_runs):
    runs = client([f"{two_runs[0]}/metrics.jsonl"]).get("/api/runs").json()["runs"]
    assert runs[0]["name"] == "metrics.jsonl" and runs[0]["metric_lines"] == 0
    assert runs[0]["problems"] == [f"{two_runs[0]}/metrics.jsonl: a file, not a run folder; give the run folder, "
                                   f"the one holding metrics.jsonl: `hybridrl view {two_runs[0]}`"]


def test_page_and_plotly_are_served_from_the_packages(two_runs):
    c = client(two_runs)
    assert 'src="static/plotly.min.js"' in c.get("/").text
    js = c.get("/static/plotly.min.js")
    assert js.status_code == 200 and "plotly" in js.text[:2000].lower() and len(js.content) > 1_000_000
    assert c.get("/static/app.js").status_code == 200 and c.get("/static/style.css").status_code == 200


def test_api_key_guards_the_api_but_not_the_page(two_runs):
    c = client(two_runs, api_key=KEY)
    assert c.get("/api/runs").status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "API key" in c.get("/api/metrics", params={"run": 0}).json()["error"]
    assert c.get("/api/runs", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert c.get("/").status_code == 200 and c.get("/health").status_code == 200
    assert client(two_runs).get("/api/runs").status_code == 200  # no key set: open (loopback only, see the CLI)


def test_every_api_route_needs_the_key_and_the_page_holds_no_run_data(two_runs, tmp_path):
    """Issue #48 part 3, for every route the app has (one added later too): with a key set, every /api route is a
    401 without it or with a wrong one. The page, its scripts and /health stay open (the page asks for the key),
    and they are the same bytes whatever runs are open: no run data reaches a visitor without the key."""
    from fastapi.routing import APIRoute

    c = client(two_runs, api_key=KEY)
    routes = [(m, r.path) for r in c.app.routes if isinstance(r, APIRoute) for m in r.methods]
    open_routes = {"/", "/static/{name}", "/health"}
    assert {p for _, p in routes} - open_routes and all(p.startswith("/api/") for _, p in routes
                                                        if p not in open_routes)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        for method, path in routes:
            if path not in open_routes:
                assert c.request(method, path, headers=headers).status_code == 401, (method, path)
    other = client([write_run(tmp_path / "secret-run", steps=2, name="SECRET")], api_key=KEY)
    for path in ("/", "/static/app.js", "/static/style.css", "/health"):
        assert c.get(path).content == other.get(path).content, path
