"""The pipeline on real data formats: GRPO on GSM8K parquet (scored by the gsm8k scorer) and on
jsonl prompts scored by a verl-style reward file given on the command line."""

from __future__ import annotations

import json
import math

import pytest

import hybridrl.rewards.scorers.gsm8k as gsm8k_scorer
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.data.preprocess import convert
from hybridrl.errors import HybridRLError
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow

SMALL = ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.n=2",
         "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.test_freq=2"]


def train(overrides: list[str]):
    cfg = load_config(RLConfig, None, overrides)
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run).fit()
    return [json.loads(line) for line in open(run.tracker.path)]


def test_grpo_on_gsm8k_parquet_uses_the_gsm8k_scorer(tmp_path, shared_data, monkeypatch):
    paths = convert("gsm8k", str(shared_data("gsm8k")), str(tmp_path / "gsm8k"))
    spy = tmp_path / "calls.txt"  # scoring runs in forked worker processes: the spy appends to a file
    real = gsm8k_scorer.extract_answer

    def extract_answer(text, method="strict"):
        with open(spy, "a") as f:
            f.write("x")
        return real(text, method)

    monkeypatch.setattr(gsm8k_scorer, "extract_answer", extract_answer)
    records = train([f"data.train_files={paths['train']}", f"data.val_files={paths['test']}",
                     "data.train_max_samples=16", "data.val_max_samples=8", "data.max_prompt_length=240",
                     "data.truncation=left", "data.max_response_length=16", f"trainer.default_local_dir={tmp_path / 'run'}",
                     *SMALL])
    assert [r["step"] for r in records] == [1, 2]
    # 2 steps x 4 prompts x 2 samples, plus 8 validation prompts at the last step: all through the gsm8k scorer
    assert len(spy.read_text()) == 2 * 4 * 2 + 8
    assert all(r["reward/errors"] == 0.0 for r in records)
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


def test_reward_model_scores_rows_without_ground_truth(tmp_path, reward_model_dir):
    rows = [{"data_source": "chat/open", "prompt": [{"role": "user", "content": f"Say something about {i}."}]}
            for i in range(12)]
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = train([f"data.train_files={jsonl}", f"data.val_files={jsonl}", "data.val_max_samples=4",
                     "reward_model.enable=true", f"reward_model.model.path={reward_model_dir}",
                     f"trainer.default_local_dir={tmp_path / 'run'}", *SMALL])
    for r in records:  # the reward model alone: the trained score is its output, no rule scorer ran
        assert r["critic/score/mean"] == pytest.approx(r["reward/rm_score/mean"], abs=1e-6)
        assert "reward/rule_score/mean" not in r and math.isfinite(r["critic/score/mean"])
    assert "val-core/chat/open/reward/mean@1" in records[-1]


def test_reward_model_mixed_with_rule_scores(tmp_path, arith_data, reward_model_dir):
    records = train([f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
                     "data.val_max_samples=4", "reward_model.enable=true", f"reward_model.model.path={reward_model_dir}",
                     "reward_model.rm_weight=0.5", "reward_model.rule_weight=1.0",
                     f"trainer.default_local_dir={tmp_path / 'run'}", *SMALL])
    for r in records:
        mixed = 0.5 * r["reward/rm_score/mean"] + r["reward/rule_score/mean"]
        assert r["critic/score/mean"] == pytest.approx(mixed, abs=1e-5)


def test_failing_reward_function_is_counted_with_on_error_zero(tmp_path, arith_data):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def flaky(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    if extra_info['index'] % 2:\n"
        "        raise RuntimeError('odd row')\n"
        "    return float(solution_str.strip() == ground_truth)\n")
    common = [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=8",
              f"custom_reward_function.path={reward}",
              "custom_reward_function.name=flaky", f"trainer.default_local_dir={tmp_path / 'run'}", *SMALL]
    with pytest.raises(HybridRLError, match=r"RuntimeError: odd row .*set reward_model\.on_error=zero"):
        train(common)
    records = train(common + ["reward_model.on_error=zero"])
    # half the rows have an odd index; each step samples 4 prompts x 2 responses
    assert sum(r["reward/errors"] for r in records) > 0
    assert all(math.isfinite(r["critic/score/mean"]) for r in records)
    assert records[-1]["val-aux/reward/errors"] == 4.0  # validation rows 0..7: four odd


def test_validation_with_n_samples_reports_pass_best_worst_and_maj_at_k(tmp_path, arith_data):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import re\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    nums = re.findall(r'-?\\d+', solution_str)\n"
        "    pred = nums[-1] if nums else ''\n"
        "    return {'score': float(pred == ground_truth), 'acc': float(pred == ground_truth), 'pred': pred}\n")
    records = train([f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
                     "data.val_max_samples=12", f"custom_reward_function.path={reward}", "custom_reward_function.name=score",
                     "actor_rollout_ref.rollout.val_kwargs.n=4", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                     "actor_rollout_ref.rollout.val_kwargs.temperature=1.0", f"trainer.default_local_dir={tmp_path / 'run'}",
                     *SMALL])
    v = {k.split("/reward/")[1]: val for k, val in records[-1].items() if k.startswith("val-core/arithmetic/reward/")}
    assert set(v) == {"mean@4", "std@4"} | {f"{m}@{k}" for m in ("best", "worst", "pass", "maj") for k in (1, 2, 4)}
    assert v["pass@1"] == pytest.approx(v["mean@4"]) == pytest.approx(v["best@1"]) == pytest.approx(v["maj@1"])
    assert v["worst@4"] <= v["worst@2"] <= v["mean@4"] <= v["pass@2"] <= v["pass@4"]
    assert v["best@4"] == pytest.approx(v["pass@4"])  # 0/1 scores: the best of k is 1 iff one of k is correct
    assert 0.0 <= v["maj@4"] <= 1.0 and records[-1]["val-aux/arithmetic/acc/mean@4"] == pytest.approx(v["mean@4"])
