"""The pipeline on real data formats: GRPO on GSM8K parquet (scored by the gsm8k scorer) and on
jsonl prompts scored by a verl-style reward file given on the command line."""

from __future__ import annotations

import json
import math

import pytest

import hybridrl.rewards.scorers.gsm8k as gsm8k_scorer
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import validate_rl_config
from hybridrl.data.preprocess import convert
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow

SMALL = ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.n=2",
         "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.test_freq=-1"]


def train(overrides: list[str]):
    cfg = load_config(RLConfig, None, overrides)
    run = build_run(cfg, validate_rl_config(cfg), log=lambda *_: None)
    RLTrainer(run).fit()
    return [json.loads(line) for line in open(run.tracker.path)]


def test_grpo_on_gsm8k_parquet_uses_the_gsm8k_scorer(tmp_path, shared_data, monkeypatch):
    paths = convert("gsm8k", str(shared_data("gsm8k")), str(tmp_path / "gsm8k"))
    calls = []
    real = gsm8k_scorer.extract_answer
    monkeypatch.setattr(gsm8k_scorer, "extract_answer", lambda text, method="strict": calls.append(text) or real(text, method))
    records = train([f"data.train_files={paths['train']}", f"data.val_files={paths['test']}",
                     "data.train_max_samples=16", "data.val_max_samples=8", "data.max_prompt_length=240",
                     "data.truncation=left", "data.max_response_length=16", f"trainer.default_local_dir={tmp_path / 'run'}",
                     *SMALL])
    assert [r["step"] for r in records] == [1, 2]
    # 2 steps x 4 prompts x 2 samples, plus 8 validation prompts at the last step: all through the gsm8k scorer
    assert len(calls) == 2 * 4 * 2 + 8
    assert "val-core/openai/gsm8k/reward/mean@1" in records[-1]
    for record in records:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float))


def test_custom_reward_file_on_jsonl_prompts(tmp_path, arith_data):
    import pyarrow.parquet as pq

    rows = pq.read_table(arith_data["train"]).to_pylist()[:40]
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    ok = solution_str.strip() == ground_truth\n"
        "    return {'score': float(ok), 'acc': float(ok), 'length': len(solution_str)}\n")
    records = train([f"data.train_files={jsonl}", f"data.val_files={jsonl}", "data.val_max_samples=8",
                     f"custom_reward_function.path={reward}", "custom_reward_function.name=my_score",
                     f"trainer.default_local_dir={tmp_path / 'run'}", *SMALL])
    last = records[-1]
    assert 0.0 <= last["reward/acc/mean"] <= 1.0 and last["reward/length/mean"] > 0
    assert "val-aux/arithmetic/length/mean@1" in last and "val-core/arithmetic/reward/mean@1" in last
