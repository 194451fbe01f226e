"""A real multi-turn GRPO run: the calculator tool configured from YAML, a model warm-started on a
few tool-call rows so it calls the tool, two steps with tool turns in the trained responses."""

from __future__ import annotations

import json
import math

import pytest
from tool_helpers import warm_start, write_sum_prompts  # tests/integration/tool_helpers.py

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow


def test_two_multi_turn_grpo_steps_with_the_calculator(random_model_dir, tmp_path):
    data = write_sum_prompts(str(tmp_path / "train.parquet"))
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    model = warm_start(random_model_dir, str(tmp_path / "warm"))
    cfg = load_config(RLConfig, None, [
        f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
        "data.max_response_length=150", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.n=4",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
        "actor_rollout_ref.rollout.temperature=0.5",
        "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path / 'run'}",
        f"trainer.rollout_data_dir={tmp_path / 'gens'}", "trainer.dump_token_details=true"])
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run).fit()
    records = [json.loads(line) for line in open(run.tracker.path)][1:]
    assert len(records) == 2
    for r in records:
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())
        assert {"num_turns/mean", "num_turns/max", "tool_call_counts/mean", "tool_call_counts/calculator",
                "tool_errors/malformed", "tool_errors/timeout"} <= set(r)
        # the engine's and the trainer's probabilities agree on model tokens (tool tokens excluded)
        assert r["training/rollout_probs_diff_max"] < 1e-4
    assert sum(r["tool_call_counts/calculator"] for r in records) > 0 and max(r["num_turns/max"] for r in records) == 2
    gens = [json.loads(line) for line in open(tmp_path / "gens" / "1.jsonl")]
    assert any("<tool_response>" in g["output"] for g in gens)
    # token detail: the model's tokens carry the trainer's entropy, the tool's tokens (not trained on) none
    from transformers import AutoConfig

    most = math.log(AutoConfig.from_pretrained(model).vocab_size)  # the entropy of a uniform π over the vocabulary
    for g in gens:
        assert len(g["token_entropy"]) == len(g["tokens"]) == len(g["token_trained"])
        for h, trained in zip(g["token_entropy"], g["token_trained"]):
            assert (h is None) == (not trained) and (h is None or 0 <= h <= most)
    assert any(0 in g["token_trained"] for g in gens)
