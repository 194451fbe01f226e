"""Prompt-prefix sharing (models/forward.py): one forward per distinct prompt gives the same
log-probs and the same gradients as one forward per row."""

import pytest
import torch

from hybridrl.batch import Sequences
from hybridrl.models.forward import Layout, batched_log_probs, distinct_prompts, response_log_probs
from hybridrl.models.loading import load_causal_lm


@pytest.fixture(scope="module")
def model(random_model_dir):
    return load_causal_lm(random_model_dir)


def grouped_batch(prompts: list[list[int]], n: int, T: int, seed: int = 0) -> Sequences:
    """n responses of random length 1..T per prompt; prompts left-padded, responses right-padded, rows shuffled."""
    g = torch.Generator().manual_seed(seed)
    P = max(map(len, prompts))
    ids, attn, resp = [], [], []
    for p in prompts:
        for _ in range(n):
            length = int(torch.randint(1, T + 1, (1,), generator=g))
            r = torch.randint(3, 300, (T,), generator=g)
            r[length:] = 0
            live = (torch.arange(T) < length).long()
            ids.append(torch.tensor([0] * (P - len(p)) + p + r.tolist()))
            attn.append(torch.cat([torch.tensor([0] * (P - len(p)) + [1] * len(p)), live]))
            resp.append(live)
    order = torch.randperm(len(ids), generator=g)
    return Sequences(torch.stack(ids)[order], torch.stack(attn)[order], torch.stack(resp)[order])


def test_distinct_prompts_finds_each_prompts_first_row():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [1, 2, 3], [7, 8, 9]])
    mask = (ids != 0).long()
    first, inverse = distinct_prompts(ids, mask)
    assert sorted(first.tolist()) == [0, 1, 3]
    assert torch.equal(ids[first][inverse], ids)  # every row maps to a row with its prompt
    assert inverse[0] == inverse[2] and inverse[1] == inverse[4] and len(set(inverse.tolist())) == 3


@pytest.mark.parametrize("T", [1, 6])
def test_shared_forward_gives_the_same_log_probs_and_gradients(model, T):
    seqs = grouped_batch([[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]], n=4, T=T)
    grads = []
    for share in (False, True):
        model.zero_grad()
        lp, ent = response_log_probs(model, seqs, temperature=0.7, with_entropy=True, layout=Layout(share))
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
    (plain, g_plain), (shared, g_shared) = grads
    assert torch.allclose(plain, shared, atol=1e-5)
    assert (shared[seqs.response_mask == 0] == 0).all()
    for a, b in zip(g_plain, g_shared):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    assert any(a.abs().sum() > 0 for a in g_shared)  # the comparison is not between zeros


def test_shared_forward_with_all_prompts_distinct_and_in_micro_batches(model):
    seqs = grouped_batch([[5, 6, 7], [8, 9], [10, 11, 12, 13]], n=1, T=5, seed=1)
    assert torch.allclose(batched_log_probs(model, seqs, 1.0, 2), batched_log_probs(model, seqs, 1.0, 2, Layout(True)),
                          atol=1e-5)


def test_shared_backward_is_bit_reproducible():
    """Resume-equals-uninterrupted needs bitwise-equal gradients run to run. Advanced indexing's
    backward on CPU is not, once the tensors are large enough for its parallel path."""
    from hybridrl.models.tiny import build_model, build_tokenizer

    model = build_model(build_tokenizer(), hidden=128, layers=2, heads=4, intermediate=256, seed=0)
    seqs = grouped_batch([list(range(5, 25)), list(range(8, 28)), list(range(13, 33))], n=8, T=12, seed=2)
    grads = []
    for _ in range(3):
        model.zero_grad()
        response_log_probs(model, seqs, layout=Layout(True))[0].sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for g in grads[1:] for a, b in zip(grads[0], g))
