"""Building a reward model to train: from a causal LM (fresh one-output head, pad id set) or an existing
reward model (head kept); a classifier with several labels or a foreign tokenizer is a one-line error."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from hybridrl.errors import ConfigError
from hybridrl.models.loading import (
    load_reward_model,
    load_tokenizer,
    reward_model_to_train,
)
from hybridrl.models.tiny import build_model


@pytest.fixture(scope="module")
def tok(random_model_dir):
    return load_tokenizer(random_model_dir)


def test_a_causal_lm_gets_a_fresh_scalar_head_and_the_pad_id(random_model_dir, tok):
    torch.manual_seed(3)
    a = reward_model_to_train(random_model_dir, tok)
    torch.manual_seed(3)
    b = reward_model_to_train(random_model_dir, tok)
    assert type(a).__name__ == "Qwen2ForSequenceClassification"
    assert a.config.num_labels == 1 and a.config.pad_token_id == tok.pad_token_id
    assert a.score.weight.shape == (1, a.config.hidden_size) and a.score.weight.abs().sum() > 0
    torch.testing.assert_close(a.score.weight, b.score.weight)  # the head's init follows torch's seed


def test_an_existing_reward_model_keeps_its_head(reward_model_dir, tok):
    saved = load_reward_model(reward_model_dir)
    model = reward_model_to_train(reward_model_dir, tok)
    torch.testing.assert_close(model.score.weight, saved.score.weight)


def test_a_multi_label_classifier_is_refused(random_model_dir, tok, tmp_path):
    AutoModelForSequenceClassification.from_pretrained(random_model_dir, num_labels=3).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="3 labels; a reward model outputs one scalar"):
        reward_model_to_train(str(tmp_path), tok)


def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tok, tmp_path):
    small = build_model(tok, hidden=16, layers=1, heads=2, intermediate=32, seed=0)
    small.resize_token_embeddings(100)  # 100 rows for a 309-token tokenizer
    small.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"tokenizer has 309 tokens but the model's embedding table has 100 rows") as e:
        reward_model_to_train(str(tmp_path), tok, key="model.partial_pretrain")
    assert str(e.value).startswith("model.partial_pretrain=") and "\n" not in str(e.value)
