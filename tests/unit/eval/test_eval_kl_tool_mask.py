"""`hybridrl eval`'s KL on multi-turn responses: tool tokens are attended to but left out of the
KL, as the trainer leaves them out of its losses (response_mask 0)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.eval.evaluate import KLMeter

V = 4  # vocabulary


class ConstantLM(torch.nn.Module):
    """A causal LM whose next-token logits are `logits` ([V]) at every position."""

    def __init__(self, logits: list[float]):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits), requires_grad=False)

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, V))


def test_tool_tokens_are_left_out_of_the_kl():
    policy = ConstantLM([0.0] * V)  # uniform: log π(y) = log 1/4 for every token
    ref = ConstantLM([math.log(3), 0.0, 0.0, 0.0])  # π_ref: token 0 has 3/6 = 1/2, the others 1/6 each
    prompts = PromptBatch(torch.tensor([[2], [2]]), torch.ones(2, 1, dtype=torch.long), ["a", "a"], ["", ""], [0, 1])
    # row 0: model token 1, a tool turn of two 0s, model token 2; row 1: one model token and padding
    rollout = Rollout(prompts, response_ids=torch.tensor([[1, 0, 0, 2], [3, 0, 0, 0]]),
                      response_mask=torch.tensor([[1, 0, 0, 1], [1, 0, 0, 0]]), rollout_log_probs=torch.zeros(2, 4),
                      uid=torch.tensor([0, 1]), response_attention_mask=torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]]))
    meter = KLMeter(policy, ref, temperature=1.0, micro_batch_size=8)
    meter(rollout)
    # on each model token (ids 1, 2, 3): k1 = log(1/4) - log(1/6) = log 1.5, and with r = π_ref/π = 2/3,
    # k3 = r - log r - 1 = log 1.5 - 1/3. Were the tool tokens (id 0: log(1/4) - log(1/2) = -log 2) counted,
    # row 0 would sum to 2 log 1.5 - 2 log 2 < 0.
    k1, k3 = math.log(1.5), math.log(1.5) - 1 / 3
    assert meter.k1_sum == pytest.approx([2 * k1, k1]) and meter.k3_sum == pytest.approx([2 * k3, k3])
    m = meter.metrics()
    assert m["kl/mean_token_k1"] == pytest.approx(k1)  # per token: divided by the 2 model tokens, not 4
    assert m["kl/mean_seq_k1"] == pytest.approx(1.5 * k1) and m["kl/mean_seq_k3"] == pytest.approx(1.5 * k3)
