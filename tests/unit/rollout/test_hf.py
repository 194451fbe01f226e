import math

import pytest
import torch

from hybridrl.batch import PromptBatch, select
from hybridrl.models.forward import response_log_probs
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine, choose_tokens, filter_logits
from hybridrl.rollout.keyed import response_keys, sample_ids_of, splitmix64, uniforms


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
    one, two = prompts(tok, ["What is 1+2?"]), prompts(tok, ["What is 1+2?", "What is 123456+654321?"])
    alone = engine.generate(*_ids(one), greedy, _sid(one))
    padded = engine.generate(*_ids(two), greedy, _sid(two))
    width = alone.response_ids.shape[1]
    assert padded.response_ids[0, :width].tolist() == alone.response_ids[0].tolist()
    assert torch.allclose(padded.log_probs[0, :width], alone.log_probs[0], atol=1e-5)


def test_generation_stops_at_eos_and_pads_after_it(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?", "What is 2+2?"])
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    free = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id).generate(*_ids(batch), greedy, _sid(batch))
    row = free.response_ids[0].tolist()
    j = next((k for k in range(1, len(row)) if row[k] not in row[:k]), 0)  # first token not seen before in row 0
    out = HFRolloutEngine(model, [row[j]], tok.pad_token_id).generate(*_ids(batch), greedy, _sid(batch))
    assert out.response_ids[0, :j + 1].tolist() == row[:j + 1]  # the end token itself is kept
    assert out.response_mask[0, :j + 1].tolist() == [1] * (j + 1)
    assert (out.response_mask[0, j + 1:] == 0).all() and (out.response_ids[0, j + 1:] == tok.pad_token_id).all()


def test_sampling_is_seeded(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?"] * 8)
    sampling = SamplingParams(max_new_tokens=4, temperature=1.5)
    a = HFRolloutEngine(model, [], tok.pad_token_id, seed=3).generate(*_ids(batch), sampling, _sid(batch))
    b = HFRolloutEngine(model, [], tok.pad_token_id, seed=3).generate(*_ids(batch), sampling, _sid(batch))
    c = HFRolloutEngine(model, [], tok.pad_token_id, seed=4).generate(*_ids(batch), sampling, _sid(batch))
    assert torch.equal(a.response_ids, b.response_ids) and not torch.equal(a.response_ids, c.response_ids)
    assert a.response_ids.shape[1] == 4  # no EOS tokens: every row runs to max_new_tokens


def test_top_k_one_equals_greedy(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 5+5?", "What is 7-2?"])
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id)
    greedy = engine.generate(*_ids(batch), SamplingParams(max_new_tokens=4, do_sample=False), _sid(batch))
    topk = engine.generate(*_ids(batch), SamplingParams(max_new_tokens=4, temperature=1.0, top_k=1), _sid(batch))
    assert torch.equal(greedy.response_ids, topk.response_ids)
    assert math.isfinite(float(topk.log_probs.sum()))


def _ids(batch):
    return batch.input_ids, batch.attention_mask


def _sid(batch):
    return sample_ids_of(batch.index, 1)


def test_splitmix64_matches_the_reference_arithmetic():
    mask = (1 << 64) - 1

    def reference(x: int) -> int:  # Steele, Lea & Flood 2014, on Python's unbounded ints mod 2^64
        z = (x + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    xs = [0, 1, 12345, (1 << 63) - 1, -1, -(1 << 63)]
    got = splitmix64(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert [g & mask for g in got] == [reference(x & mask) for x in xs]
    assert got[0] & mask == 0xE220A8397B1DCDAF  # SplitMix64's first output from seed 0


def test_keyed_uniforms_are_uniform_and_inverse_cdf_sampling_follows_the_distribution():
    keys = response_keys(seed=7, stream="train", call=0, sample_ids=torch.arange(40_000))
    u = uniforms(keys, t=3)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    counts = torch.histc(u.float(), bins=10, min=0.0, max=1.0)
    assert ((counts - 4000).abs() < 300).all()  # ~5 sigma of a binomial(40000, 0.1)
    assert not torch.equal(u, uniforms(keys, t=4))  # each position draws anew
    # probabilities 0.5, 0.3, 0.15, 0.05; top-k 3 removes the last one
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).expand(40_000, 4)
    tokens, _ = choose_tokens(logits, SamplingParams(max_new_tokens=1, top_k=3), u)
    freq = torch.bincount(tokens, minlength=4).double() / 40_000
    assert freq[3] == 0 and torch.allclose(freq[:3], torch.tensor([0.5, 0.3, 0.15]).double() / 0.95, atol=0.01)


def test_a_response_does_not_depend_on_the_rest_of_its_batch(parts):
    """The same prompts sampled as one batch, or split in two batches as two data-parallel workers
    would (same seed, same call), give the same responses."""
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?", "What is 10+20?", "What is 3-1?"])
    batch.index[:] = [10, 11, 12]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.5)
    whole = generate_rollout(HFRolloutEngine(model, [], tok.pad_token_id, seed=5), batch, 4, sampling)
    parts_ = [generate_rollout(HFRolloutEngine(model, [], tok.pad_token_id, seed=5), select(batch, rows), 4, sampling)
              for rows in (torch.tensor([0]), torch.tensor([1, 2]))]
    split_ids = torch.cat([p.response_ids for p in parts_])
    assert torch.equal(whole.response_ids, split_ids)
    assert len({tuple(r) for r in whole.response_ids.tolist()}) > 3  # samples of one prompt differ


def test_validation_draws_never_move_training_samples(parts):
    tok, model = parts
    batch = prompts(tok, ["What is 1+2?", "What is 10+20?"])
    sampling = SamplingParams(max_new_tokens=5, temperature=1.5)
    with_val, without = (HFRolloutEngine(model, [], tok.pad_token_id, seed=2) for _ in range(2))
    first = generate_rollout(with_val, batch, 4, sampling)
    val = generate_rollout(with_val, batch, 4, sampling, stream="val")
    again = generate_rollout(with_val, batch, 4, sampling)
    assert torch.equal(generate_rollout(without, batch, 4, sampling).response_ids, first.response_ids)
    assert torch.equal(generate_rollout(without, batch, 4, sampling).response_ids, again.response_ids)
    assert not torch.equal(val.response_ids, first.response_ids)  # its own draws
    assert not torch.equal(again.response_ids, first.response_ids)  # the same prompts a call later: new draws
    assert with_val.state_dict()["calls"] == {"train": 2, "val": 1}


def test_max_num_seqs_chunks_give_the_same_rollout(parts):
    """rollout.max_num_seqs bounds the KV cache by generating in chunks; EOS ends chunks at different
    lengths, and the result is padded back to one batch equal to the unchunked one."""
    tok, model = parts
    eos = list(range(0, model.config.vocab_size, 8))  # an eighth of the vocabulary ends a response: early, uneven ends
    batch = prompts(tok, ["What is 1+2?", "What is 10+20?", "What is 3-1?"])
    sampling = SamplingParams(max_new_tokens=8, temperature=1.5)
    whole = generate_rollout(HFRolloutEngine(model, eos, tok.pad_token_id, seed=5), batch, 3, sampling)
    chunked = generate_rollout(HFRolloutEngine(model, eos, tok.pad_token_id, seed=5, max_num_seqs=4), batch, 3, sampling)
    assert torch.equal(whole.response_ids, chunked.response_ids)
    assert torch.equal(whole.response_mask, chunked.response_mask)
    assert torch.allclose(whole.rollout_log_probs, chunked.rollout_log_probs, atol=1e-5)
    lengths = whole.response_mask.sum(1)
    assert len(set(lengths.tolist())) > 2 and lengths[4:8].max() < whole.response_mask.shape[1]  # a chunk ends early
