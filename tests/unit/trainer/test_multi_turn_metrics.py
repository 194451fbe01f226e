"""The trainer's tool-use metrics of a multi-turn batch (also what `hybridrl eval --tool-config` reports)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.trainer.metrics import multi_turn_metrics


def test_multi_turn_metrics_by_hand():
    stats = {"num_turns": torch.tensor([1.0, 2.0, 2.0, 3.0]),
             "tool_call_counts/calculator": torch.tensor([0.0, 1.0, 0.0, 1.0]),
             "tool_call_counts/python": torch.tensor([0.0, 0.0, 1.0, 1.0]),
             "tool_errors/timeout": torch.tensor([0.0, 0.0, 1.0, 0.0])}
    m = multi_turn_metrics(stats)
    # calls per response: 0, 1, 1, 2 (calculator + python) -> mean 1, min 0, max 2; 3 of 4 responses called
    assert (m["tool_call_counts/mean"], m["tool_call_counts/min"], m["tool_call_counts/max"]) == (1.0, 0.0, 2.0)
    assert m["tool_call_counts/frac_with_call"] == 0.75
    assert (m["num_turns/mean"], m["num_turns/min"], m["num_turns/max"]) == (2.0, 1.0, 3.0)  # 8 turns / 4
    # totals over the batch
    assert (m["tool_call_counts/calculator"], m["tool_call_counts/python"], m["tool_errors/timeout"]) == (2.0, 2.0, 1.0)


def test_no_calls_give_zero_rates():
    m = multi_turn_metrics({"num_turns": torch.tensor([1.0, 1.0]), "tool_call_counts/calculator": torch.zeros(2)})
    assert m["tool_call_counts/frac_with_call"] == 0.0 and m["tool_call_counts/mean"] == 0.0
    assert m["num_turns/mean"] == pytest.approx(1.0)
