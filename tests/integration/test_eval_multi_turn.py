"""`hybridrl eval --tool-config`: a tiny model warm-started to call the calculator is evaluated with
the trainer's multi-turn rollout; its tool calls run, are counted with the trainer's metric names,
and greedy eval reproduces the trainer's own validation of the same model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tool_helpers import SUMS, warm_start, write_sum_prompts  # tests/integration/tool_helpers.py

from hybridrl.config.loader import load_config
from hybridrl.config.schema import MultiTurnConfig, RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.eval.evaluate import EvalSettings, evaluate, format_table
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow

LENGTH = 150  # a call (~85 tokens) and its tool turn fit, with room for an answer


@pytest.fixture(scope="module")
def setup(random_model_dir, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("eval-tools")
    (out / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    return {"data": write_sum_prompts(str(out / "val.parquet")), "tools": str(out / "tools.yaml"),
            "model": warm_start(random_model_dir, str(out / "warm")), "base": random_model_dir, "dir": str(out)}


def _settings(setup, **kw) -> EvalSettings:
    return EvalSettings(data=[setup["data"]], model=setup["model"], max_response_length=LENGTH, num_workers=0, **kw)


@pytest.fixture(scope="module")
def with_tools(setup):
    """8 prompts x 4 samples at T=0.5, up to 2 model turns, KL to the model before its warm start."""
    out = Path(setup["dir"])
    s = _settings(setup, n=4, temperature=0.5, tool_config=setup["tools"], max_assistant_turns=2, ref=setup["base"],
                  output=str(out / "eval.json"), dump=str(out / "gens.jsonl"))
    return evaluate(s, log=lambda *_: None)


def test_tool_calls_run_and_are_counted_with_the_trainers_names(with_tools):
    m, rows = with_tools.metrics, with_tools.rows
    calls = [row.get("tool_call_counts/calculator", 0) for row in rows]
    assert len(rows) == 32 and sum(calls) > 0  # the warm start makes the model call
    assert m["tool_call_counts/calculator"] == sum(calls)
    assert m["tool_call_counts/mean"] == pytest.approx(sum(calls) / 32)
    assert m["tool_call_counts/frac_with_call"] == pytest.approx(sum(c > 0 for c in calls) / 32)
    # 2 model turns: a call in the second is not run, so at most one call per response
    assert m["tool_call_counts/max"] == 1 and m["num_turns/max"] == 2 and m["num_turns/min"] >= 1
    assert m["num_turns/mean"] == pytest.approx(sum(row["num_turns"] for row in rows) / 32)
    assert {"tool_errors/malformed", "tool_errors/timeout"} <= set(m)
    answered = [re.search(r'"expression": "(\d+)\+(\d+)"}}</tool_call>.*?<tool_response>\n(-?\d+)\n', row["output"],
                          re.DOTALL) for row in rows]
    answered = [m.groups() for m in answered if m]
    assert answered and all(int(a) + int(b) == int(total) for a, b, total in answered)  # the calculator ran


def test_kl_leaves_tool_turns_out_and_is_positive_against_another_model(with_tools):
    m = with_tools.metrics
    assert m["kl/mean_seq_k1"] > 0.01 and m["kl/mean_token_k3"] > 0
    # per token: divided by the model's own tokens (response_length counts those only)
    lengths = [row["response_length"] for row in with_tools.rows]
    assert m["kl/mean_seq_k1"] == pytest.approx(sum(r["kl_k1"] for r in with_tools.rows) / 32)
    assert max(lengths) <= LENGTH


def test_json_dump_and_table_carry_the_multi_turn_settings(with_tools):
    s = with_tools.settings
    saved = json.loads(Path(s.output).read_text())
    assert (saved["tool_config"], saved["max_assistant_turns"]) == (s.tool_config, 2)
    assert saved["max_tool_response_length"] == MultiTurnConfig().max_tool_response_length  # the trainer's default
    assert saved["metrics"]["tool_call_counts/mean"] == with_tools.metrics["tool_call_counts/mean"]
    dumped = [json.loads(line) for line in Path(s.dump).read_text().splitlines()]
    assert [row.get("tool_call_counts/calculator", 0) for row in dumped] == \
        [row.get("tool_call_counts/calculator", 0) for row in with_tools.rows]
    assert all(row["num_turns"] >= 1 for row in dumped)  # per-row counts, as the trainer's dumps
    table = format_table(with_tools)
    assert "tools " in table and "up to 2 model turns" in table
    assert re.search(r"tool_call_counts/calculator +\d+\n", table)  # a total: printed as an integer


def test_without_tool_config_nothing_is_called(setup):
    res = evaluate(_settings(setup, n=2, temperature=0.5, max_samples=4), log=lambda *_: None)
    assert not [k for k in res.metrics if k.startswith(("num_turns/", "tool_call_counts/", "tool_errors/"))]
    assert res.metrics.get("tool_call_counts/mean", 0.0) == 0.0
    outputs = [row["output"] for row in res.rows]
    assert any("<tool_call>" in o for o in outputs)  # the model still writes calls; nobody runs them
    assert not any("<tool_response>" in o for o in outputs)


def test_greedy_eval_equals_the_trainers_validation(setup, tmp_path):
    """The trainer's step-0 validation (greedy, n = 1 by default) and `eval --greedy --n 1` of the
    same model, data and tools: the same conversations, scores, turn counts and metrics."""
    cfg = load_config(RLConfig, None, [
        f"data.train_files={setup['data']}", f"data.val_files={setup['data']}", "data.train_batch_size=4",
        f"data.max_response_length={LENGTH}", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.n=2",
        f"actor_rollout_ref.model.path={setup['model']}",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={setup['tools']}",
        f"trainer.default_local_dir={tmp_path / 'run'}", f"trainer.validation_data_dir={tmp_path / 'val'}"])
    trainer_metrics = RLTrainer(build_run(resolve(cfg), log=lambda *_: None)).validate(step=0)
    trainer_rows = [json.loads(line) for line in (tmp_path / "val" / "0.jsonl").read_text().splitlines()]
    res = evaluate(_settings(setup, n=1, greedy=True, tool_config=setup["tools"], max_assistant_turns=2,
                             ref=setup["model"]), log=lambda *_: None)
    assert len(res.rows) == len(trainer_rows) == len(SUMS)
    assert sum(row.get("tool_call_counts/calculator", 0) for row in res.rows) > 0  # greedy calls too
    for ours, theirs in zip(res.rows, trainer_rows):
        assert {k: v for k, v in ours.items() if not k.startswith("kl_")} == {k: v for k, v in theirs.items() if k != "step"}
    assert {k: res.metrics[k] for k in trainer_metrics} == pytest.approx(trainer_metrics)
    assert abs(res.metrics["kl/mean_seq_k1"]) <= 1e-6  # the model against itself, tool turns and all
