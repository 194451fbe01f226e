"""`hybridrl check` end to end on the bundled model: every check runs on the default GRPO config and passes,
each timed, the JSON report holds what the console showed; and one defect seeded in the config (a scorer that
never pays a correct answer, train prompts repeated in the validation file) turns exactly its lines to ✗ while
the rest still run."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from hybridrl.check.registry import ORDER
from hybridrl.cli import main

pytestmark = pytest.mark.slow


def base(arith_data) -> list[str]:
    return ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
            f"data.val_files=[{arith_data['val']}]"]


def report(path) -> dict:
    with open(path) as f:
        return json.load(f)


def test_every_check_passes_on_the_default_config_and_is_timed(arith_data, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["check", "--json", str(out), "--work-dir", str(tmp_path / "work"), *base(arith_data)]) == 0
    printed = capsys.readouterr().out
    r = report(out)
    assert [c["name"] for c in r["checks"]] == list(ORDER) and r["passed"]
    assert {c["status"] for c in r["checks"]} == {"pass"}, [(c["name"], c["summary"]) for c in r["checks"]]
    assert all(c["seconds"] > 0 for c in r["checks"]) and r["seconds"] >= sum(c["seconds"] for c in r["checks"])
    for c in r["checks"]:  # the console line of each check: mark, name, time, summary
        assert f"✓ {c['name']:<12}{c['seconds']:6.1f}s  {c['summary']}" in printed
    assert "check passed: 10 ✓, 0 ✗, 0 –" in printed
    runs = tmp_path / "work" / "runs"  # the resume check's runs happened, with their checkpoints
    assert any((runs / d / "global_step_3").is_dir() for d in os.listdir(runs))


def test_seeded_defects_fail_their_own_lines_only(arith_data, tmp_path, capsys):
    # a validation file that repeats 5 training prompts, and a scorer that wants an answer format no one writes
    val = tmp_path / "val.parquet"
    table = pq.read_table(arith_data["val"]).to_pylist()
    train = pq.read_table(arith_data["train"]).to_pylist()[:5]
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(table + train), str(val))
    scorer = tmp_path / "scorer.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return 1.0 if f'ANSWER[{ground_truth}]' in solution_str else 0.0\n")
    out = tmp_path / "report.json"
    items = base(arith_data)[:-1] + [f"data.val_files=[{val}]", f"custom_reward_function.path={scorer}"]
    assert main(["check", "--json", str(out), "--only", "data,reward,config", *items]) == 1
    r = {c["name"]: c for c in report(out)["checks"]}
    assert r["config"]["status"] == "pass"
    assert r["data"]["status"] == "fail" and "5" in r["data"]["summary"] and "val" in r["data"]["summary"]
    assert r["reward"]["status"] == "fail" and r["reward"]["fix"]
