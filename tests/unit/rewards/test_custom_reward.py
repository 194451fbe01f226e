"""verl-style reward functions from a user file, used unchanged: float or dict, per sample or batched."""

from __future__ import annotations

import textwrap

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.loading import load_tokenizer
from hybridrl.rewards.custom import load_function
from hybridrl.rewards.manager import RewardManager

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
        return float("nan")
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


def test_dict_results_give_score_and_numeric_extras(random_model_dir, reward_file):
    tok = load_tokenizer(random_model_dir)
    out = RewardManager(tok, custom_fn=load_function(reward_file, "compute_score")).score(
        _rollout(tok, ["12", "3"], ["12", "4"]))
    assert out.scores.tolist() == [2.0, -1.0]
    assert out.extras["acc"].tolist() == [1.0, 0.0]
    assert out.extras["row"].tolist() == [10.0, 11.0]  # extra_info reached the function
    assert "pred" not in out.extras  # a string extra is not a metric


def test_float_and_batched_functions(random_model_dir, reward_file):
    tok = load_tokenizer(random_model_dir)
    rollout = _rollout(tok, ["12", "3"], ["12", "4"])
    assert RewardManager(tok, custom_fn=load_function(reward_file, "plain")).score(rollout).scores.tolist() == [0.5, 0.5]
    out = RewardManager(tok, custom_fn=load_function(reward_file, "batched"), batched=True).score(rollout)
    assert out.scores.tolist() == [2.0, 1.0]  # len("12"), len("3")


def test_bad_functions_and_files_are_clear_errors(random_model_dir, reward_file, tmp_path):
    tok = load_tokenizer(random_model_dir)
    with pytest.raises(HybridRLError, match=r"returned nan for sample 0"):
        RewardManager(tok, custom_fn=load_function(reward_file, "nan_score")).score(_rollout(tok, ["1"], ["1"]))
    with pytest.raises(ConfigError, match=r"custom_reward_function\.name='score' is not a function in .*my_reward\.py; "
                                          r"functions there: batched, compute_score, nan_score, plain"):
        load_function(reward_file, "score")
    with pytest.raises(ConfigError, match=r"file not found"):
        load_function(str(tmp_path / "nope.py"), "compute_score")
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match=r"failed to import: ModuleNotFoundError"):
        load_function(str(broken), "compute_score")
