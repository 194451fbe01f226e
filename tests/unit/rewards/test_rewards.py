import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.errors import ConfigError
from hybridrl.models.loading import load_tokenizer
from hybridrl.rewards.manager import RewardManager, on_last_token
from hybridrl.rewards.scorers.arithmetic import compute_score


@pytest.mark.parametrize("text,truth,expected", [
    ("42", "42", 1.0), ("The answer is 42.", "42", 1.0), ("41", "42", 0.0), ("", "42", 0.0),
    ("4 then 42", "42", 1.0), ("42 then 4", "42", 0.0), ("-7", "-7", 1.0), ("7", "-7", 0.0), ("042", "42", 1.0),
])
def test_arithmetic_scorer_takes_the_last_integer(text, truth, expected):
    assert compute_score("arithmetic", text, truth) == expected


def _rollout(tok, texts, sources, truths):
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, ids)) + 1  # at least one padding column
    resp = torch.full((len(ids), width), tok.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        resp[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    prompts = PromptBatch(torch.ones(len(ids), 1, dtype=torch.long), torch.ones(len(ids), 1, dtype=torch.long),
                          sources, truths, list(range(len(ids))))
    return Rollout(prompts, resp, mask, torch.zeros(resp.shape), torch.arange(len(ids)))


def test_manager_puts_the_score_on_the_last_response_token(random_model_dir):
    tok = load_tokenizer(random_model_dir)
    rollout = _rollout(tok, ["12", "3"], ["arithmetic"] * 2, ["12", "4"])
    out = RewardManager(tok).score(rollout)
    assert out.scores.tolist() == [1.0, 0.0]
    assert out.rewards.tolist() == [1.0, 0.0]  # no shaping configured
    token_scores = on_last_token(out.rewards, rollout.response_mask)
    # "12" + EOS is 3 tokens: the score sits at index 2 (the EOS), nowhere else
    assert token_scores[0].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert token_scores[1].sum() == 0.0


def test_unknown_data_source_lists_the_known_ones(random_model_dir):
    tok = load_tokenizer(random_model_dir)
    with pytest.raises(ConfigError, match=r"data_source='gsm9k' is not a known reward scorer; valid values: DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500, arithmetic, math, openai/gsm8k"):
        RewardManager(tok).score(_rollout(tok, ["1"], ["gsm9k"], ["1"]))


def test_overlong_buffer_shapes_rewards_but_not_scores(random_model_dir):
    from hybridrl.rewards.manager import OverlongBuffer, RewardSettings

    tok = load_tokenizer(random_model_dir)
    rollout = _rollout(tok, ["12", "3"], ["arithmetic"] * 2, ["12", "3"])
    # "12"+EOS is 3 tokens, "3"+EOS 2; max 4 with a buffer of 2: free up to 2 tokens, 3 tokens -> -(3 - 2) / 2 * 0.4
    out = RewardManager(tok, settings=RewardSettings(overlong=OverlongBuffer(4, buffer_len=2, penalty_factor=0.4))).score(
        rollout)
    assert out.scores.tolist() == [1.0, 1.0]
    torch.testing.assert_close(out.overlong_penalty, torch.tensor([-0.2, 0.0]))
    torch.testing.assert_close(out.rewards, torch.tensor([0.8, 1.0]))
