"""verl-style reward functions from a user file, used unchanged: float or dict, per sample or batched."""

from __future__ import annotations

import re
import textwrap
import time

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.loading import load_tokenizer
from hybridrl.rewards.custom import load_function
from hybridrl.rewards.manager import RewardManager, RewardSettings
from hybridrl.rewards.pool import FunctionRef, ScoringPool

# Written as a verl user writes it: verl's signature, no hybridrl import.
VERL_STYLE = textwrap.dedent('''
    def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        correct = solution_str.strip() == ground_truth
        return {"score": 2.0 if correct else -1.0, "acc": float(correct), "row": extra_info["index"],
                "pred": solution_str}

    def plain(data_source, solution_str, ground_truth, extra_info=None):
        return 0.5

    def batched(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
        return [float(len(s)) for s in solution_strs]

    def nan_score(data_source, solution_str, ground_truth, extra_info=None):
        return float("nan") if solution_str == "3" else float(solution_str == ground_truth)

    def inf_score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": float("inf") if solution_str == "3" else float(solution_str == ground_truth)}

    def raises(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        if solution_str == "3":
            return 1 / 0
        return float(solution_str == ground_truth)

    def hangs(data_source, solution_str, ground_truth, extra_info=None):
        import time
        if solution_str == "3":
            time.sleep(60)
        return float(solution_str == ground_truth)

    def crashes(data_source, solution_str, ground_truth, extra_info=None):
        import os
        if solution_str == "3":
            os._exit(3)  # a C extension's segfault looks the same from outside
        return float(solution_str == ground_truth)

    def returns_text(data_source, solution_str, ground_truth, extra_info=None):
        return "oops" if solution_str == "3" else float(solution_str == ground_truth)

    def exits(data_source, solution_str, ground_truth, extra_info=None):
        import sys
        if solution_str == "3":
            sys.exit(4)
        return float(solution_str == ground_truth)

    def exits_batched(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
        import sys
        sys.exit(4)
''')


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(VERL_STYLE)
    return str(path)


def _rollout(tok, texts, truths):
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, ids))
    resp = torch.full((len(ids), width), tok.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        resp[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    n = len(ids)
    prompts = PromptBatch(torch.ones(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long), ["mine"] * n,
                          truths, list(range(n)), [{"index": 10 + i} for i in range(n)])
    return Rollout(prompts, resp, mask, torch.zeros(resp.shape), torch.arange(n))


def manager(tok, path, name, workers=0, timeout_s=5.0, on_error="raise", batched=False):
    pool = ScoringPool(FunctionRef(path, name, batched), num_workers=workers, timeout_s=timeout_s)
    return RewardManager(tok, pool, RewardSettings(on_error=on_error))


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_results_give_score_and_extras_per_sample(random_model_dir, reward_file, workers):
    tok = load_tokenizer(random_model_dir)
    m = manager(tok, reward_file, "compute_score", workers)
    out = m.score(_rollout(tok, ["12", "3"], ["12", "4"]))
    m.close()
    assert out.scores.tolist() == [2.0, -1.0]
    assert out.extras["acc"].tolist() == [1.0, 0.0]
    assert out.extras["row"].tolist() == [10.0, 11.0]  # extra_info reached the function
    assert "pred" not in out.extras  # a string extra is not a metric, but it is kept per sample
    assert [d["pred"] for d in out.details] == ["12", "3"]
    assert out.errors.tolist() == [False, False]


@pytest.mark.parametrize("workers", [0, 1])
def test_float_and_batched_functions(random_model_dir, reward_file, workers):
    tok = load_tokenizer(random_model_dir)
    rollout = _rollout(tok, ["12", "3"], ["12", "4"])
    assert manager(tok, reward_file, "plain", workers).score(rollout).scores.tolist() == [0.5, 0.5]
    out = manager(tok, reward_file, "batched", workers, batched=True).score(rollout)
    assert out.scores.tolist() == [2.0, 1.0]  # len("12"), len("3")


def test_bad_files_are_clear_errors(random_model_dir, reward_file, tmp_path):
    with pytest.raises(ConfigError, match=r"custom_reward_function\.name='score' is not a function in .*my_reward\.py; "
                                          r"functions there: .*compute_score, .*plain"):
        load_function(reward_file, "score")
    with pytest.raises(ConfigError, match=r"file not found"):
        load_function(str(tmp_path / "nope.py"), "compute_score")
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match=r"failed to import: ModuleNotFoundError"):
        load_function(str(broken), "compute_score")


# Each way a reward function can fail on the second response ("3"), and what the error must say.
FAILURES = {
    "raise": ("raises", r"ZeroDivisionError: division by zero \(at .*my_reward\.py:\d+\)"),
    "hang": ("hangs", r"timed out after reward_model\.timeout_s=0\.5s"),
    "nan": ("nan_score", r"returned a non-finite score \(nan\)"),
    "inf": ("inf_score", r"returned a non-finite score \(inf\)"),
    "crash": ("crashes", r"the scoring process failed"),
    "bad type": ("returns_text", r"returned str; return a float or a dict with 'score'"),
    "sys.exit": ("exits", r"it called sys.exit\(4\) \(at .*my_reward\.py:\d+\)"),
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_scorer_failures_stop_the_run_naming_the_sample(random_model_dir, reward_file, kind):
    name, says = FAILURES[kind]
    tok = load_tokenizer(random_model_dir)
    m = manager(tok, reward_file, name, workers=2, timeout_s=0.5)
    try:
        # the batch stops at its first failure: a response not yet scored then is not counted as failed
        with pytest.raises(HybridRLError, match=r"failed on 1 of 3 responses( \(\d left unscored: the batch stopped at "
                                                r"the failure\))?; first: response 1 \(data_source='mine', "
                                                r"dataset row 1, response '3'\): " + says
                                                + r".*set reward_model\.on_error=zero"):
            m.score(_rollout(tok, ["12", "3", "4"], ["12", "4", "4"]))
    finally:
        m.close()


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_on_error_zero_scores_failures_0_and_counts_them(random_model_dir, reward_file, kind):
    name, says = FAILURES[kind]
    tok = load_tokenizer(random_model_dir)
    m = manager(tok, reward_file, name, workers=2, timeout_s=0.5, on_error="zero")
    try:
        out = m.score(_rollout(tok, ["12", "3", "4"], ["12", "4", "4"]))
        # the pool survives a killed or crashed worker: the next batch scores normally
        again = m.score(_rollout(tok, ["12"], ["12"]))
    finally:
        m.close()
    assert out.errors.tolist() == [False, True, False]
    assert out.scores.tolist() == [1.0, 0.0, 1.0] and torch.isfinite(out.rewards).all()
    assert re.search(says, out.details[1]["error"])
    assert again.scores.tolist() == [1.0] and not again.errors.any()


def test_hang_is_cut_at_the_timeout_not_waited_out(random_model_dir, reward_file):
    tok = load_tokenizer(random_model_dir)
    m = manager(tok, reward_file, "hangs", workers=2, timeout_s=0.5, on_error="zero")
    start = time.perf_counter()
    try:
        m.score(_rollout(tok, ["3", "3"], ["4", "4"]))  # both hang; in two workers at once
    finally:
        m.close()
    assert time.perf_counter() - start < 5.0  # the function sleeps 60 s


def test_batched_failure_counts_every_sample(random_model_dir, reward_file):
    tok = load_tokenizer(random_model_dir)
    out = manager(tok, reward_file, "raises", workers=1, on_error="zero", batched=True).score(
        _rollout(tok, ["12", "3"], ["12", "4"]))
    assert out.errors.tolist() == [True, True] and out.scores.tolist() == [0.0, 0.0]


def test_pools_in_one_process_keep_their_own_functions(random_model_dir, reward_file):
    tok = load_tokenizer(random_model_dir)
    custom = manager(tok, reward_file, "plain")  # in-process, a user function
    builtin = RewardManager(tok)  # in-process, the built-in scorers: must not replace the user function
    rollout = _rollout(tok, ["12"], ["12"])
    assert custom.score(rollout).scores.tolist() == [0.5]
    rollout.prompts.data_source[0] = "arithmetic"
    assert builtin.score(rollout).scores.tolist() == [1.0]


def test_sys_exit_at_import_is_one_line_naming_the_file(tmp_path):
    """It used to end hybridrl with exit status 5 and nothing printed."""
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\nsys.exit(5)\n")
    with pytest.raises(ConfigError, match=re.escape(f"custom_reward_function.path='{quits}' failed to import: it "
                                                    "called sys.exit(5)")):
        load_function(str(quits), "compute_score")
    bare = tmp_path / "bare_exit.py"
    bare.write_text("raise SystemExit\n")
    with pytest.raises(ConfigError, match=re.escape("failed to import: it called sys.exit(None)")):
        load_function(str(bare), "compute_score")


@pytest.mark.parametrize("batched", [False, True])
def test_sys_exit_when_called_in_this_process_is_a_scorer_error_not_the_end(random_model_dir, reward_file, batched):
    """num_workers=0 scores in the trainer's own process: a sys.exit there must not end the run."""
    tok = load_tokenizer(random_model_dir)
    m = manager(tok, reward_file, "exits_batched" if batched else "exits", workers=0, on_error="zero", batched=batched)
    out = m.score(_rollout(tok, ["12", "3"], ["12", "4"]))
    assert out.errors.tolist() == ([True, True] if batched else [False, True])
    assert "it called sys.exit(4)" in out.details[1]["error"]


def test_errors_name_the_settings_that_gave_the_file(reward_file, tmp_path):
    """hybridrl eval loads the same files from its flags, and its errors name those flags."""
    flags = ("--custom-reward-path", "--custom-reward-name")
    with pytest.raises(ConfigError, match=r"^--custom-reward-name score is not a function in "):
        load_function(reward_file, "score", flags)
    with pytest.raises(ConfigError, match=re.escape(f"--custom-reward-path {tmp_path / 'nope.py'}: file not found")):
        load_function(str(tmp_path / "nope.py"), "compute_score", flags)
    text = tmp_path / "reward.txt"
    text.write_text("def compute_score(*a): return 1.0\n")
    with pytest.raises(ConfigError, match=re.escape(f"--custom-reward-path {text}: cannot import it as Python; give "
                                                    "a .py file")):
        load_function(str(text), "compute_score", flags)
