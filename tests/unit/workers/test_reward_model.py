"""The reward-model role: scores at the last real token, token-in or re-rendered, combined with rule scores."""

from __future__ import annotations

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.data.dataset import encode_prompts
from hybridrl.errors import ConfigError
from hybridrl.models.loading import load_reward_model, load_tokenizer
from hybridrl.rewards.manager import RewardManager, RewardSettings
from hybridrl.workers.reward_model import RewardModel, last_token_scores


@pytest.fixture(scope="module")
def rm(reward_model_dir):
    return load_reward_model(reward_model_dir)


@pytest.fixture(scope="module")
def tok(random_model_dir):
    return load_tokenizer(random_model_dir)


def _rollout(tok, question, answers, truths):
    """One prompt (chat-templated, left-padded to its own length) with several answers, EOS-terminated."""
    messages = [{"role": "user", "content": question}]
    prompt = encode_prompts(tok, [messages])[0]
    ids = [tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for a in answers]
    width, n = max(map(len, ids)) + 1, len(answers)
    resp = torch.full((n, width), tok.pad_token_id)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, row in enumerate(ids):
        resp[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
    p = torch.tensor([prompt] * n)
    prompts = PromptBatch(p, torch.ones_like(p), ["arithmetic"] * n, truths, list(range(n)), [{}] * n, [messages] * n)
    return Rollout(prompts, resp, mask, torch.zeros(resp.shape), torch.arange(n))


def test_last_token_scores_match_hf_pooling_and_ignore_padding(rm, tok):
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]])
    full = last_token_scores(rm, ids, torch.ones_like(ids))
    torch.testing.assert_close(full, rm(input_ids=ids).logits[:, 0])
    # the same tokens with left or right padding score the same (positions count real tokens only)
    left = torch.tensor([[0, 0, 5, 6, 7, 8]])
    right = torch.tensor([[5, 6, 7, 8, 0, 0]])
    mask_l, mask_r = torch.tensor([[0, 0, 1, 1, 1, 1]]), torch.tensor([[1, 1, 1, 1, 0, 0]])
    torch.testing.assert_close(last_token_scores(rm, left, mask_l), full[:1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last_token_scores(rm, right, mask_r), full[:1], atol=1e-5, rtol=1e-5)


def by_hand(rm, ids):
    """The score head on the last token of one unpadded sequence."""
    return rm.score(rm.base_model(input_ids=torch.tensor([ids])).last_hidden_state)[0, -1, 0]


def test_eos_equal_to_pad_is_still_the_scored_token(rm):
    # HF pooling compares ids with pad_token_id; a response ending in EOS == pad would lose its last token
    pad = rm.config.pad_token_id
    ids = torch.tensor([[5, 6, 7, pad]])
    ours = last_token_scores(rm, ids, torch.ones_like(ids))
    torch.testing.assert_close(ours[0], by_hand(rm, [5, 6, 7, pad]), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours, rm(input_ids=ids).logits[:, 0])  # HF scored token 7 instead


def test_token_in_scores_the_policy_tokens_and_rendering_matches_by_hand(rm, tok):
    answers = ["12", "13", "The answer is 12"]
    rollout = _rollout(tok, "What is 5+7?", answers, ["12"] * 3)
    model = RewardModel(rm, tok, tok, micro_batch_size=2)
    assert model.token_in  # same vocabulary: the policy's own ids, no decode/re-encode
    got = model.scores(rollout, answers)
    seqs = rollout.sequences()
    for i in range(3):  # [prompt | answer EOS pad...]: the EOS is the scored token
        real = seqs.input_ids[i][seqs.attention_mask[i].bool()].tolist()
        torch.testing.assert_close(got[i], by_hand(rm, real), atol=1e-5, rtol=1e-5)
    assert len(set(got.tolist())) == 3
    # another vocabulary: (messages + the decoded response) in the reward model's chat template
    model.token_in = False
    rendered = model.scores(rollout, answers)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 5+7?"}, {"role": "assistant", "content": "13"}],
                                   tokenize=False)
    torch.testing.assert_close(rendered[1], by_hand(rm, tok(text, add_special_tokens=False)["input_ids"]),
                               atol=1e-5, rtol=1e-5)


def test_manager_mixes_reward_model_and_rule_scores(rm, tok):
    rollout = _rollout(tok, "What is 5+7?", ["12", "13"], ["12", "12"])
    model = RewardModel(rm, tok, tok, micro_batch_size=8)
    rm_scores = model.scores(rollout, ["12", "13"])
    alone = RewardManager(tok, settings=RewardSettings(), reward_model=model).score(rollout)
    torch.testing.assert_close(alone.scores, rm_scores)  # verl's default: the reward model replaces rule scores
    assert "rule_score" not in alone.extras
    mixed = RewardManager(tok, settings=RewardSettings(rm_weight=0.5, rule_weight=2.0), reward_model=model).score(rollout)
    torch.testing.assert_close(mixed.scores, 0.5 * rm_scores + 2.0 * torch.tensor([1.0, 0.0]))
    assert mixed.extras["rule_score"].tolist() == [1.0, 0.0]
    torch.testing.assert_close(mixed.extras["rm_score"], rm_scores)


def test_reward_model_without_rule_scores_needs_no_known_data_source(rm, tok):
    rollout = _rollout(tok, "Say hi", ["hi"], [""])
    rollout.prompts.data_source[0] = "Anthropic/hh-rlhf"  # no rule scorer for it; none is called
    out = RewardManager(tok, reward_model=RewardModel(rm, tok, tok, 8)).score(rollout)
    assert torch.isfinite(out.scores).all() and not out.errors.any()


def test_load_refuses_a_causal_lm_and_multi_label_models(random_model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"is a Qwen2ForCausalLM checkpoint, not a trained \*ForSequenceClassification "
                                          r"reward model; its score head would be random"):
        load_reward_model(random_model_dir)
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(random_model_dir, num_labels=3).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"has 3 labels; a reward model outputs one scalar"):
        load_reward_model(str(tmp_path))
