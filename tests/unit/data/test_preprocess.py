"""GSM8K and MATH-500 preprocessing on the real files: every reference answer, written as a model
would write it, scores 1.0 with the matching scorer, and a perturbed one scores 0.0."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from hybridrl.errors import HybridRLError
from hybridrl.data.preprocess import MATH_INSTRUCTION, convert
from hybridrl.rewards.scorers import SCORERS


def test_gsm8k_test_split_converts_and_every_reference_answer_scores(tmp_path, shared_data):
    paths = convert("gsm8k", str(shared_data("gsm8k")), str(tmp_path))
    assert set(paths) == {"train", "test"}
    rows = pq.read_table(paths["test"]).to_pylist()
    assert len(rows) == 1319
    first = rows[0]
    assert first["data_source"] == "openai/gsm8k" and first["reward_model"]["ground_truth"] == "18"
    assert first["prompt"][0]["role"] == "user" and first["prompt"][0]["content"].endswith('after "####".')
    assert first["extra_info"]["split"] == "test" and first["extra_info"]["index"] == 0
    score = SCORERS.get("openai/gsm8k")
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        assert "," not in truth
        # the dataset's own solution ends in "#### <answer>", as a model is asked to write it
        assert score(row["data_source"], row["extra_info"]["answer"], truth) == 1.0, row["extra_info"]["index"]
        wrong = str(int(float(truth)) + 1)
        assert score(row["data_source"], f"So the answer is\n#### {wrong}", truth) == 0.0


def test_math500_converts_and_every_boxed_reference_scores(tmp_path, shared_data):
    paths = convert("math", str(shared_data("math500")), str(tmp_path))
    assert set(paths) == {"test"}
    rows = pq.read_table(paths["test"]).to_pylist()
    assert len(rows) == 500
    assert all(r["prompt"][0]["content"].endswith(MATH_INSTRUCTION) for r in rows)
    score = SCORERS.get("HuggingFaceH4/MATH-500")
    misses = [r["extra_info"]["index"] for r in rows
              if score(r["data_source"], f"Thus the answer is $\\boxed{{{r['reward_model']['ground_truth']}}}$.",
                       r["reward_model"]["ground_truth"]) != 1.0]
    assert misses == []
    wrong = [r for r in rows[:50] if score(r["data_source"], "\\boxed{123456789}", r["reward_model"]["ground_truth"])]
    assert wrong == []


def test_bad_input_rows_name_the_file_and_row(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    with pytest.raises(HybridRLError, match=r"test\.jsonl row 0: the answer has no '#### <number>' line"):
        convert("gsm8k", str(bad), str(tmp_path / "out"))
    bad.write_text(json.dumps({"question": "", "answer": "#### 1"}) + "\n")
    with pytest.raises(HybridRLError, match=r"row 0: field 'question' is missing or not a non-empty string"):
        convert("gsm8k", str(bad), str(tmp_path / "out"))
    bad.write_text("{not json\n")
    with pytest.raises(HybridRLError, match=r"test\.jsonl line 1 is not valid JSON .*; fix or delete the line"):
        convert("gsm8k", str(bad), str(tmp_path / "out"))


def test_math_ground_truth_commas_and_boxed_fallback():
    from hybridrl.data.preprocess import math_row

    assert math_row({"problem": "p", "answer": "10,080"}, "test", 0, "x")["reward_model"]["ground_truth"] == "10080"
    assert math_row({"problem": "p", "answer": "(1,2)"}, "test", 0, "x")["reward_model"]["ground_truth"] == "(1,2)"
    # no answer field: the last \boxed{} of the solution
    row = math_row({"problem": "p", "solution": "so \\boxed{\\frac{1}{2}}."}, "test", 3, "x")
    assert row["reward_model"]["ground_truth"] == "\\frac{1}{2}" and row["extra_info"]["index"] == 3
    with pytest.raises(HybridRLError, match=r"x: no 'answer' field and no \\boxed\{\} in 'solution'"):
        math_row({"problem": "p", "solution": "none"}, "test", 0, "x")


def test_a_lone_surrogate_names_the_row_and_field_before_anything_is_written(tmp_path):
    """pyarrow's writer used to fail on it with a UnicodeEncodeError naming no row."""
    bad = tmp_path / "test.jsonl"
    rows = [{"question": "q", "answer": "#### 1"}, {"question": "q \ud83d", "answer": "#### 2"}]
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(HybridRLError, match=r"test\.jsonl row 1: field 'question' holds a lone surrogate \\ud83d at "
                                            r"character 2 .*; restore the whole character or delete it$"):
        convert("gsm8k", str(bad), str(tmp_path / "out"))
    assert not (tmp_path / "out" / "test.parquet").exists()
