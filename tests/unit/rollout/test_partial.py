"""Partial rollouts in the hf engine (rollout/partial.py, rollout/hf.py): weights offered while a generation runs
are taken at the next decode step; every token keeps the log-prob and the version of the weights that sampled
it, and without a swap the output is today's engine's, bit for bit."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.rollout.partial import WeightInbox

V, EOS, PAD = 64, 5, 0


def model(seed: int):
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
    return Qwen2ForCausalLM(cfg).eval()


def prompts():
    torch.manual_seed(7)
    ids = torch.randint(6, V, (6, 5))
    mask = torch.ones_like(ids)
    mask[0, :2] = mask[3, :1] = 0  # left padding
    return ids.masked_fill(mask == 0, PAD), mask


SAMPLING = SamplingParams(max_new_tokens=10, temperature=1.3)


def engine(lean: bool, max_num_seqs: int = 1024):
    return HFRolloutEngine(model(0), [EOS], PAD, seed=3, lean_decode=lean, own_copy=True, max_num_seqs=max_num_seqs)


def teacher_forced(m, ids, mask, out) -> torch.Tensor:
    """[N, T] log-softmax(logits / temperature) of each sampled token under model m, by one plain forward."""
    full_ids = torch.cat([ids, out.response_ids], 1)
    full_mask = torch.cat([mask, out.response_mask], 1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = m(input_ids=full_ids, attention_mask=full_mask, position_ids=pos).logits.float()
    T, P = out.response_ids.shape[1], ids.shape[1]
    logp = torch.log_softmax(logits[:, P - 1:P + T - 1] / SAMPLING.temperature, -1)
    return logp.gather(-1, out.response_ids[..., None]).squeeze(-1)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("swap_at", [0, 1, 4])
def test_a_swap_at_step_t_samples_tokens_from_t_on_with_the_new_weights(lean, swap_at):
    ids, mask = prompts()
    eng, new = engine(lean), model(1)
    inbox = WeightInbox(version=3)

    def push(start, t, tokens, live, logits):  # the trainer's push arrives while token t is being chosen
        if t + 1 == swap_at:
            inbox.offer(list(new.state_dict().items()), 4)

    if swap_at == 0:
        inbox.offer(list(new.state_dict().items()), 4)
    out = eng.generate(ids, mask, SAMPLING, torch.arange(len(ids)), on_step=push, inbox=inbox)
    live = out.response_mask.bool()
    assert out.response_ids.shape[1] > swap_at + 1 and inbox.version == 4 and inbox.take() is None
    old_lp, new_lp = teacher_forced(model(0), ids, mask, out), teacher_forced(new, ids, mask, out)
    before = live.clone()
    before[:, swap_at:] = False
    after = live & ~before
    assert torch.allclose(out.log_probs[before], old_lp[before], atol=1e-5)
    assert torch.allclose(out.log_probs[after], new_lp[after], atol=1e-5)
    assert not torch.allclose(old_lp[after], new_lp[after], atol=1e-3)  # the two versions are told apart
    expected = torch.where(before, 3, torch.where(after, 4, -1))
    assert torch.equal(out.versions, expected)


@pytest.mark.slow  # 12 s of decoding
def test_without_a_swap_the_output_is_the_plain_engines_bit_for_bit():
    ids, mask = prompts()
    for lean in (True, False):
        plain = engine(lean).generate(ids, mask, SAMPLING, torch.arange(len(ids)))
        partial = engine(lean).generate(ids, mask, SAMPLING, torch.arange(len(ids)), inbox=WeightInbox(2))
        assert plain.versions is None
        for a, b in ((plain.response_ids, partial.response_ids), (plain.response_mask, partial.response_mask),
                     (plain.log_probs, partial.log_probs)):
            assert torch.equal(a, b)
        assert torch.equal(partial.versions, torch.where(partial.response_mask.bool(), 2, -1))


def test_a_swap_in_the_first_chunk_gives_the_later_chunks_the_new_weights_from_their_start():
    ids, mask = prompts()
    eng, inbox = engine(True, max_num_seqs=4), WeightInbox(0)
    push = lambda start, t, tokens, live, logits: (  # noqa: E731
        inbox.offer(list(model(1).state_dict().items()), 1) if (start, t) == (0, 1) else None)
    out = eng.generate(ids, mask, SAMPLING, torch.arange(len(ids)), on_step=push, inbox=inbox)
    live = out.response_mask.bool()
    assert (out.versions[:4, :2][live[:4, :2]] == 0).all() and (out.versions[:4, 2:][live[:4, 2:]] == 1).all()
    assert (out.versions[4:][live[4:]] == 1).all()
