"""The per-token entropy of π(.|s_t) that trainer.dump_token_details writes: exact on known logits, from the
same forward as the log-probs, zero on padding, and whatever the micro-batches."""

import math
from types import SimpleNamespace

import torch

from hybridrl.batch import Sequences
from hybridrl.models.forward import batched_log_probs, batched_log_probs_and_entropy

V = 3


class TableModel(torch.nn.Module):
    """Logits at a position depend on that position's input token only (a lookup table), so the expected
    distribution of each response token is known; counts its forwards."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table)
        self.forwards = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        self.forwards += 1
        return SimpleNamespace(logits=self.table[input_ids])  # [N, L, V]


def table_and_batch():
    # token 0: uniform logits, entropy ln 3; token 1: one sure token (logit 50), entropy ~0; token 2: [1, 2, 3]
    table = torch.tensor([[0.0, 0.0, 0.0], [50.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    ids = torch.tensor([[1, 0, 2, 1, 0], [0, 2, 1, 2, 0]])  # 2 prompt + 3 response columns
    response_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # row 1's last response token is padding
    attention = torch.cat([torch.ones(2, 2, dtype=torch.long), response_mask], 1)
    return table, Sequences(ids, attention, response_mask)


def test_entropy_equals_the_categorical_entropy_of_the_logits_before_each_token():
    table, seqs = table_and_batch()
    for temperature in (1.0, 0.5):
        model = TableModel(table)
        both = batched_log_probs_and_entropy(model, seqs, temperature, micro_batches=2)  # [N, 2, T]
        assert model.forwards == 1  # log-probs and entropy come from one forward
        lp, entropy = both[:, 0], both[:, 1]
        # the response token at column j is chosen after input token P + j - 1 (P = 2)
        before = seqs.input_ids[:, 1:4]  # [N, T]
        dist = torch.distributions.Categorical(logits=table[before] / temperature)
        mask = seqs.response_mask.float()
        assert torch.allclose(entropy, dist.entropy() * mask, atol=1e-6)
        assert torch.allclose(lp, dist.log_prob(seqs.input_ids[:, 2:]) * mask, atol=1e-6)
        assert torch.equal(lp, batched_log_probs(TableModel(table), seqs, temperature, 2))
    # worked values at T=1: row 0 is chosen after tokens 0 (uniform: ln 3), 2 ([1,2,3]) and 1 (sure: ~0)
    p = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), 0)
    e1 = batched_log_probs_and_entropy(TableModel(table), seqs, 1.0, 2)[:, 1]
    assert math.isclose(e1[0, 0].item(), math.log(3), rel_tol=1e-6)
    assert math.isclose(e1[0, 1].item(), -(p * p.log()).sum().item(), rel_tol=1e-6)  # 0.8524
    assert e1[0, 2].item() < 1e-18 and e1[1, 2].item() == 0.0  # sure token; padding


def test_micro_batches_and_an_empty_shard_do_not_change_the_entropy():
    table, seqs = table_and_batch()
    whole = batched_log_probs_and_entropy(TableModel(table), seqs, 1.0, 2)
    assert torch.equal(whole, batched_log_probs_and_entropy(TableModel(table), seqs, 1.0, 1))
    empty = Sequences(seqs.input_ids[:0], seqs.attention_mask[:0], seqs.response_mask[:0])
    assert batched_log_probs_and_entropy(TableModel(table), empty, 1.0, 2).shape == (0, 2, 3)

