"""trainer.dump_token_details: per-token lists over a row's real response tokens, tool tokens marked."""

import math
from types import SimpleNamespace

import torch

from hybridrl.trainer.generations import add_token_details


class CharTokenizer:
    def batch_decode(self, ids, skip_special_tokens=False):
        return ["".join(chr(96 + t) for t in seq) for seq in ids]  # 1 -> "a", 2 -> "b", ...


def test_token_lists_cover_real_tokens_and_mark_tool_tokens():
    # row 0: 3 generated tokens then padding; row 1 (multi-turn): gen, tool, tool, gen
    attention = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    trained = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 1]])
    engine = torch.tensor([[-0.1, -0.2, -0.3, 0.0], [-0.5, 0.0, 0.0, -1.0]])
    rollout = SimpleNamespace(response_ids=torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]]), response_mask=trained,
                              rollout_log_probs=engine, response_attention=lambda: attention)
    trainer = engine - torch.tensor([[0.0, 0.1, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]])
    rows = [{}, {}]
    add_token_details(rows, rollout, CharTokenizer(), trainer)
    assert rows[0]["tokens"] == ["a", "b", "c"] and rows[1]["tokens"] == ["d", "e", "f", "g"]
    assert rows[1]["token_trained"] == [1, 0, 0, 1]
    assert rows[0]["token_logprobs"] == [-0.1, -0.2, -0.3]
    assert rows[1]["token_logprobs"] == [-0.5, None, None, -1.0]  # no model sampled the tool's tokens
    assert rows[1]["token_trainer_logprobs"] == [-0.5, None, None, -1.5]
    # exp(-0.2) - exp(-0.3): the engine gave the 2nd token more probability than the trainer
    assert math.isclose(rows[0]["token_prob_gap"][1], round(math.exp(-0.2) - math.exp(-0.3), 6))
    assert rows[0]["token_prob_gap"][0] == 0.0


def test_without_trainer_log_probs_only_the_engine_side_is_written():
    rollout = SimpleNamespace(response_ids=torch.tensor([[1, 2]]), response_mask=torch.tensor([[1, 1]]),
                              rollout_log_probs=torch.tensor([[-1.0, float("nan")]]),
                              response_attention=lambda: torch.tensor([[1, 1]]))
    rows = [{}]
    add_token_details(rows, rollout, CharTokenizer())
    assert rows[0]["token_logprobs"] == [-1.0, None] and "token_prob_gap" not in rows[0]


def test_entropy_is_written_on_trained_tokens_only():
    attention = torch.tensor([[1, 1, 1, 0]])
    trained = torch.tensor([[1, 0, 1, 0]])  # gen, tool, gen, padding
    rollout = SimpleNamespace(response_ids=torch.tensor([[1, 2, 3, 0]]), response_mask=trained,
                              rollout_log_probs=torch.tensor([[-0.1, 0.0, -0.2, 0.0]]), response_attention=lambda: attention)
    rows = [{}]
    add_token_details(rows, rollout, CharTokenizer(), rollout.rollout_log_probs, torch.tensor([[1.0986123, 0.5, 0.25, 0.0]]))
    assert rows[0]["token_entropy"] == [1.098612, None, 0.25]  # rounded to 6 decimals; none on the tool token
    add_token_details(rows := [{}], rollout, CharTokenizer(), rollout.rollout_log_probs)
    assert "token_entropy" not in rows[0]
