import math

import pytest
import torch

from hybridrl.batch import PromptBatch
from hybridrl.models.forward import response_log_probs
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine, filter_logits


@pytest.fixture(scope="module")
def parts(random_model_dir):
    tok = load_tokenizer(random_model_dir)
    return tok, load_causal_lm(random_model_dir)


def prompts(tok, texts):
    ids = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
           for t in texts]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ids]
    width = max(map(len, ids))
    x = torch.full((len(ids), width), tok.pad_token_id)
    m = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        x[i, width - len(row):], m[i, width - len(row):] = torch.tensor(row), 1
    return PromptBatch(x, m, ["arithmetic"] * len(ids), ["0"] * len(ids), list(range(len(ids))))


def test_filter_logits_top_k_and_top_p_by_hand():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)[0, :2]).all()
    assert filter_logits(logits, top_k=2, top_p=1.0)[0, 2:].tolist() == [3.0, 4.0]
    # probs 0.5, 0.3, 0.15, 0.05: mass before each token is 0, .5, .8, .95; top_p=0.7 keeps the first two
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    kept = ~torch.isinf(filter_logits(logits, top_k=-1, top_p=0.7))
    assert kept.tolist() == [[False, True, False, True]]


def test_rollout_log_probs_match_the_trainer_forward(parts):
    tok, model = parts
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, seed=0)
    batch = prompts(tok, ["What is 1+2?", "What is 10+20?", "What is 3-1?"])
    ro = generate_rollout(engine, batch, n=4, sampling=SamplingParams(max_new_tokens=6, temperature=0.7))
    assert ro.response_ids.shape[0] == 12 and ro.uid.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    lp, _ = response_log_probs(model, ro.sequences(), temperature=0.7)
    assert torch.allclose(lp, ro.rollout_log_probs, atol=1e-5)
    assert (ro.rollout_log_probs[ro.response_mask == 0] == 0).all()


def test_left_padding_does_not_change_greedy_output(parts):
    tok, model = parts
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id)
    greedy = SamplingParams(max_new_tokens=5, do_sample=False)
    alone = engine.generate(*_ids(prompts(tok, ["What is 1+2?"])), greedy)
    padded = engine.generate(*_ids(prompts(tok, ["What is 1+2?", "What is 123456+654321?"])), greedy)
    width = alone.response_ids.shape[1]
    assert padded.response_ids[0, :width].tolist() == alone.response_ids[0].tolist()
    assert torch.allclose(padded.log_probs[0, :width], alone.log_probs[0], atol=1e-5)


def test_generation_stops_at_eos_and_pads_after_it(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?", "What is 2+2?"])
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    free = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id).generate(*_ids(batch), greedy)
    row = free.response_ids[0].tolist()
    j = next((k for k in range(1, len(row)) if row[k] not in row[:k]), 0)  # first token not seen before in row 0
    out = HFRolloutEngine(model, [row[j]], tok.pad_token_id).generate(*_ids(batch), greedy)
    assert out.response_ids[0, :j + 1].tolist() == row[:j + 1]  # the end token itself is kept
    assert out.response_mask[0, :j + 1].tolist() == [1] * (j + 1)
    assert (out.response_mask[0, j + 1:] == 0).all() and (out.response_ids[0, j + 1:] == tok.pad_token_id).all()


def test_sampling_is_seeded(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?"] * 8)
    sampling = SamplingParams(max_new_tokens=4, temperature=1.5)
    a = HFRolloutEngine(model, [], tok.pad_token_id, seed=3).generate(*_ids(batch), sampling)
    b = HFRolloutEngine(model, [], tok.pad_token_id, seed=3).generate(*_ids(batch), sampling)
    c = HFRolloutEngine(model, [], tok.pad_token_id, seed=4).generate(*_ids(batch), sampling)
    assert torch.equal(a.response_ids, b.response_ids) and not torch.equal(a.response_ids, c.response_ids)
    assert a.response_ids.shape[1] == 4  # no EOS tokens: every row runs to max_new_tokens


def test_top_k_one_equals_greedy(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 5+5?", "What is 7-2?"])
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id)
    greedy = engine.generate(*_ids(batch), SamplingParams(max_new_tokens=4, do_sample=False))
    topk = engine.generate(*_ids(batch), SamplingParams(max_new_tokens=4, temperature=1.0, top_k=1))
    assert torch.equal(greedy.response_ids, topk.response_ids)
    assert math.isfinite(float(topk.log_probs.sum()))


def _ids(batch):
    return batch.input_ids, batch.attention_mask
