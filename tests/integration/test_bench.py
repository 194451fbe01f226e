"""The speed benchmark's hybridrl side (bench/hybridrl_grpo.py) runs the workload it claims, and
bench/speed.py's arithmetic is right. No timing is asserted: the benchmark is the place for speed.
(The TRL side needs bench/.venv-trl, which `make bench` installs; CI does not.)"""

import json
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import speed  # noqa: E402
import workload  # noqa: E402


def test_hybridrl_runner_runs_the_fixed_workload(random_model_dir, tmp_path):
    out = tmp_path / "steps.jsonl"
    subprocess.run([sys.executable, str(REPO / "bench" / "hybridrl_grpo.py"), "--model", random_model_dir,
                    "--steps", "2", "--threads", "1", "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    n = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
    for r in records:
        assert r["gen_tokens"] == n * workload.NEW_TOKENS  # EOS ignored: every response is full length
        assert r["train_tokens"] > r["gen_tokens"]  # prompts + responses
        assert 0 < r["gen_s"] < r["step_s"] and r["train_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_gb"] > 0
        assert "update_actor" in r["timing"] and "old_log_prob" not in r["timing"] and "ref" not in r["timing"]


def test_shaped_reward_varies_within_a_group():
    assert workload.shaped("12 apples", "12") == pytest.approx(1 + 2 / 9)
    assert workload.shaped("abc", "7") == 0.0 and workload.shaped("a1", "7") == 0.5


def test_executed_flops_count_each_prompt_once():
    shape = {"n_matmul": 1000, "n_layers": 2, "width": 8}
    prompt = 10
    rec = {"train_tokens": 32 * (prompt + workload.NEW_TOKENS), "gen_tokens": 32 * workload.NEW_TOKENS}
    plain, shared = speed.step_flops(rec, shape, False), speed.step_flops(rec, shape, True)
    seq = prompt + workload.NEW_TOKENS
    assert plain["train_nominal"] == plain["train_executed"] == 6 * 1000 * 32 * seq + 12 * 2 * 8 * 32 * seq ** 2
    attention = 12 * 2 * 8 * (4 * prompt ** 2 + 32 * (seq ** 2 - prompt ** 2))  # prompts once, responses in full
    assert shared["train_executed"] == 6 * 1000 * (4 * prompt + 32 * workload.NEW_TOKENS) + attention
    assert plain["rollout"] == 2 * 1000 * (32 * workload.NEW_TOKENS + 32 * prompt)
    assert shared["rollout"] == 2 * 1000 * (32 * workload.NEW_TOKENS + 4 * prompt)


def test_prompt_sharing_is_read_from_the_overrides():
    rows = {c.name: c.shares_prompts for c in speed.CONFIGS}
    assert rows["trl"] is False and rows["hybridrl-like"] is False and rows["hybridrl-best"] is True


def test_summary_medians_and_speedups():
    shape = {"n_matmul": 1000, "n_layers": 2, "width": 8}
    recs = [{"step_s": s, "cpu_s": 2 * s, "gen_s": s / 2, "rollout_s": s / 2, "train_s": s / 2,
             "gen_tokens": 1024, "train_tokens": 1728, "peak_rss_gb": g} for s, g in ((1.0, 0.5), (3.0, 0.7), (2.0, 0.6))]
    stats = speed.summarize(recs, shape, False, peak_flops=1e9)
    assert stats["step_s"] == 2.0 and stats["cpu_s"] == 4.0 and stats["peak_rss_gb"] == 0.7
    flops = speed.step_flops(recs[0], shape, False)["train_nominal"]
    assert stats["mfu_train_nominal"] == pytest.approx(flops / 1.0 / 1e9)
    rows = [{"model": "tiny", "config": "trl", "step_s": 2.0, "cpu_s": 4.0},
            {"model": "tiny", "config": "hybridrl-best", "step_s": 0.5, "cpu_s": 2.0}]
    speed.add_speedups(rows)
    assert rows[1]["speedup"] == 4.0 and rows[1]["cpu_speedup"] == 2.0 and rows[0]["speedup"] == 1.0
