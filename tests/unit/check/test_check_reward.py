"""The `reward` check proves its invariants through the run's own reward manager on a correct setup, and reports
✗ naming the cause for each defect it exists for: a NaN reward, a scorer that gives 0 to well-formatted reference
answers (or rewards an empty one), a non-deterministic scorer, a scorer too slow for reward_model.timeout_s, a
reward manager that silently accepts a NaN return (hybridrl's own code, patched), and a scorer whose format the
model never writes (the bundled model's bare-number answers scored by GSM8K's '####' scorer)."""

from __future__ import annotations

import re

import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import CHECKS
from hybridrl.check.result import FAIL, NA, PASS
from hybridrl.check.runner import _run_one


def run_reward(tmp_path, arith_data, *overrides: str):
    """The reward check as `hybridrl check` runs it (an exception is a ✗, not a crash)."""
    import hybridrl.check.reward  # noqa: F401  (registers the check)

    ctx = CheckContext(None, ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
                              f"data.val_files=[{arith_data['val']}]", *overrides], str(tmp_path / "work"))
    return _run_one(CHECKS.entry("reward"), ctx)


def reward_file(tmp_path, body: str, name: str = "reward.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"custom_reward_function.path={path}"


def test_passes_with_the_built_in_scorer(tmp_path, arith_data):
    r = run_reward(tmp_path, arith_data)
    assert r.status == PASS, r
    text = "\n".join(r.details)
    assert "reference solutions score 1, an empty response 0 (16 rows)" in text
    assert "32 scores are finite and the same twice" in text
    assert "within reward_model.timeout_s=30" in text
    assert "NaN, None and string returns are refused (reward_model.on_error=raise)" in text
    # the bundled model is SFT-trained on these sums: some of its own greedy answers are right
    assert re.search(r"the model's own answers score above an empty response on [1-8]/8 prompts", text), text


def test_passes_with_a_batched_custom_function(tmp_path, arith_data):
    fn = reward_file(tmp_path, "def compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kw):\n"
                               "    return [float(s.strip() == g) for s, g in zip(solution_strs, ground_truths)]\n")
    r = run_reward(tmp_path, arith_data, fn, "reward_model.reward_manager=batch", "reward_model.on_error=zero")
    assert r.status == PASS, r
    assert any("the batched call for 256 responses" in d for d in r.details)
    assert any("refused (reward_model.on_error=zero)" in d for d in r.details)


@pytest.mark.parametrize("on_error", ["raise", "zero"])
def test_a_nan_reward_fails(tmp_path, arith_data, on_error):
    fn = reward_file(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    return float('nan')\n")
    r = run_reward(tmp_path, arith_data, fn, f"reward_model.on_error={on_error}")
    assert r.status == FAIL
    if on_error == "raise":  # the run stops at the first step
        # how many were scored before the stop depends on the 2 worker processes' timing
        assert re.match(r"scoring real rows fails: the reward function failed on \d+ of 32 responses", r.summary)
    else:  # the run trains on 0 for every response
        assert "the scorer failed on 32 of 32 responses to real rows" in r.summary
    assert "non-finite score (nan)" in r.summary + "\n".join(r.details)


def test_a_scorer_that_gives_0_to_well_formatted_references_fails(tmp_path, arith_data):
    # wants \boxed{answer}; the data's reference solutions (and its prompts) give the bare number
    fn = reward_file(tmp_path, "import re\n"
                               "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    m = re.search(r'\\\\boxed\\{(.*?)\\}', solution_str)\n"
                               "    return 1.0 if m and m.group(1) == ground_truth else 0.0\n")
    r = run_reward(tmp_path, arith_data, fn)
    assert r.status == FAIL
    assert r.summary.startswith("the reference solution of 16/16 rows scores no more than an empty response (0 vs 0)")
    assert "does not reward a correct answer" in r.summary and "custom_reward_function" in r.summary
    assert any("reference solutions score 0, an empty response 0" in d for d in r.details)
    assert "answer format" in r.fix


def test_a_scorer_that_rewards_an_empty_response_fails(tmp_path, arith_data):
    fn = reward_file(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    return 1.0\n")
    r = run_reward(tmp_path, arith_data, fn)
    assert r.status == FAIL and "scores no more than an empty response (1 vs 1)" in r.summary


def test_a_non_deterministic_scorer_fails(tmp_path, arith_data):
    fn = reward_file(tmp_path, "import random\n"
                               "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    return float(solution_str.strip() == ground_truth) + random.random()\n")
    r = run_reward(tmp_path, arith_data, fn)
    assert r.status == FAIL and "32 of 32 responses scored differently twice" in r.summary
    assert "deterministic" in r.fix


def test_a_scorer_too_slow_for_the_timeout_fails(tmp_path, arith_data):
    fn = reward_file(tmp_path, "import time\n"
                               "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    time.sleep(0.6)\n"
                               "    return float(solution_str.strip() == ground_truth)\n")
    # seconds, not tens of milliseconds: on loaded cores (pytest-xdist beside other runs) a 0.06 s call with a
    # 0.1 s timeout timed out outright, which is another message
    r = run_reward(tmp_path, arith_data, fn, "reward_model.timeout_s=1.0", "data.train_max_samples=2")
    assert r.status == FAIL
    assert "not within half of reward_model.timeout_s=1" in r.summary and "the slowest call takes" in r.summary
    suggested = float(r.fix.split("reward_model.timeout_s=")[1].split()[0])
    assert suggested >= 2.4  # 4x the 0.6 s call: twice the margin the check asks for


def test_a_reward_manager_that_accepts_nan_fails(tmp_path, arith_data, monkeypatch):
    """Seeded in hybridrl's own code: the pool's check of a return value lets anything numeric (NaN) and None
    through; the check names the bug."""
    from hybridrl.rewards import pool

    def unchecked(value):
        score = value if isinstance(value, float) else 0.0  # None and "1.0" become a silent 0, NaN passes
        return pool.Scored(score, {})

    monkeypatch.setattr(pool, "_checked", unchecked)
    r = run_reward(tmp_path, arith_data, "reward_model.num_workers=0")
    assert r.status == FAIL
    assert r.summary.startswith("hybridrl's reward manager accepts a nan return: the run trains on score nan with no "
                                "error counted; a None return: the run trains on score 0.0 with no error counted")
    assert "hybridrl bug" in r.fix


def test_with_a_reward_model_the_reference_part_is_not_applicable(tmp_path, arith_data, reward_model_dir):
    r = run_reward(tmp_path, arith_data, "reward_model.enable=true", f"reward_model.model.path={reward_model_dir}")
    assert r.status == PASS, r
    assert any("not applicable: reference vs empty: a reward model alone scores" in d for d in r.details)
    assert any("32 scores are finite and the same twice" in d for d in r.details)
    assert any("not applicable: bad returns: a reward model alone scores" in d for d in r.details)


# ---- the model's own answers -----------------------------------------------------------------------------------
def marked_data(tmp_path, data_source: str, marker: str) -> dict[str, str]:
    """The arithmetic task with reference solutions that end in `marker` + the answer, as verl's GSM8K
    preprocessing keeps them ('... #### 72'); the bundled model answers with the bare number."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hybridrl.data.arithmetic import make_problems, to_row

    paths = {}
    splits = (("train", make_problems(40, 1, 2, 2, 99, "+")), ("val", make_problems(8, 2, 2, 2, 99, "+")))
    for split, problems in splits:
        rows = [to_row(expr, answer, split, i) for i, (expr, answer) in enumerate(problems)]
        for row, (expr, answer) in zip(rows, problems):
            row["data_source"] = data_source
            row["extra_info"]["answer"] = f"{expr} = {answer}\n{marker}{answer}"
        paths[split] = str(tmp_path / f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), paths[split])
    return paths


def test_answers_the_gsm8k_scorer_cannot_read_fail(tmp_path):
    """The SmolLM2 GSM8K run: the scorer wants '#### <number>', the model never writes it."""
    r = run_reward(tmp_path, marked_data(tmp_path, "openai/gsm8k", "#### "), "data.max_response_length=16")
    assert r.status == FAIL, r
    assert r.summary.startswith("the model's own answers score 0 (no more than an empty response) on 8/8 prompts it "
                                "finished: the run starts with (almost) no reward to learn from"), r
    text = "\n".join(r.details)
    assert "reference solutions score 1, an empty response 0" in text  # the scorer itself is right
    assert "the 'openai/gsm8k' scorer reads '#### <number>' in the last 300 characters: 0/8 finished answers hold it" \
        in text
    assert re.search(r"an answer \(data.train_files row \d+, ground truth '\d+'\) ends '\d+'", text), text
    assert 'output the final answer after "####"' in r.fix and "custom_reward_function" in r.fix and "SFT" in r.fix


def test_answers_a_custom_scorer_never_rewards_fail(tmp_path):
    data = marked_data(tmp_path, "arithmetic", "Answer: ")
    fn = reward_file(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                               "    return float(solution_str.strip().endswith('Answer: ' + ground_truth))\n")
    r = run_reward(tmp_path, data, fn, "data.max_response_length=16")
    assert r.status == FAIL and r.summary.startswith("the model's own answers score 0"), r
    assert any(d.startswith("the scorer is custom_reward_function") for d in r.details)
    assert "make custom_reward_function accept the answers the model writes" in r.fix


def test_answers_cut_by_the_check_are_not_judged(tmp_path, monkeypatch):
    """Decoding stopped by the check's own time limit, long before the run's: no ✗ on answers it never saw end."""
    from hybridrl.check import reward_answers

    monkeypatch.setattr(reward_answers, "ANSWER_SECONDS", 0.0)
    r = run_reward(tmp_path, marked_data(tmp_path, "openai/gsm8k", "#### "), "data.max_response_length=16")
    assert r.status == PASS, r
    assert any(d.startswith("not applicable: the model's own answers: 8 of 8 were cut by the check's 0s limit (at 1 "
                            "tokens") for d in r.details), r.details


def test_answers_of_a_large_model_are_not_applicable(tmp_path, arith_data, monkeypatch):
    from hybridrl.check import reward_answers

    monkeypatch.setattr(reward_answers, "ANSWER_MAX_BYTES", 1_000_000)
    r = run_reward(tmp_path, arith_data)
    assert r.status == PASS, r
    assert "the model's own answers score" not in r.summary
    assert any(d.startswith("not applicable: the model's own answers: its weights (14.0 MB) are too large to sample "
                            "on this machine (up to 1.0 MB)") for d in r.details), r.details
