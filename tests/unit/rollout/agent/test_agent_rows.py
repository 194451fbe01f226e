"""Agent trajectories as training rows (rollout/agent/rows.py, scoring.py): hand-built recorder samples give exact
tensors and masks; the reward rule; failed rows carry no signal; the agent/* metrics."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.batch import PromptBatch
from hybridrl.rewards.manager import RewardOutput
from hybridrl.rollout.agent.recorder import Segment
from hybridrl.rollout.agent.rows import (
    ERROR,
    OK,
    TIMEOUT,
    AgentOutcome,
    agent_rollout,
    final_texts,
    merged_row,
    returned_reward,
)
from hybridrl.rollout.agent.scoring import agent_rewards
from hybridrl.trainer.agent_source import agent_metrics, agent_row

PAD = 0


def _prompts(rows: list[list[int]]) -> PromptBatch:
    """Dataset prompts, left-padded, with their columns."""
    P = max(map(len, rows))
    ids = torch.tensor([[PAD] * (P - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows])
    k = len(rows)
    return PromptBatch(ids, mask, ["arith"] * k, [str(10 + i) for i in range(k)], list(range(100, 100 + k)),
                       [{"split": "train", "tag": i} for i in range(k)], [[{"role": "user", "content": f"q{i}"}]
                                                                         for i in range(k)])


def _seg(prompt, tokens, mask, log_probs=None) -> Segment:
    log_probs = log_probs or [-0.5 if m else 0.0 for m in mask]
    return Segment(list(prompt), list(tokens), list(mask), list(log_probs))


def test_rows_hold_the_trajectory_with_mask_one_exactly_on_generated_tokens():
    # agent 0: turn 1 = [10, 11], the user turn appended = [20, 21], turn 2 = [12, 13], then a rendering suffix [22]
    # that no generation followed (dropped: no signal after the last generated token)
    a = _seg([5, 6, 7], [10, 11, 20, 21, 12, 13, 22], [1, 1, 0, 0, 1, 1, 0], [-.1, -.2, 0, 0, -.3, -.4, 0])
    b = _seg([8], [30, 31, 32, 33, 34, 35, 36], [1] * 7)  # longer than max_response=6: cut after 6
    c = _seg([1, 2, 3, 4, 5, 6, 7], [40], [1])  # prompt 7 > max_prompt=6: masked out, the dataset prompt kept
    outcomes = [AgentOutcome(OK, a, reward=1.0), AgentOutcome(OK, b, reward=0.5), AgentOutcome(OK, c, reward=1.0),
                AgentOutcome(ERROR, a, error="RuntimeError: boom")]
    prompts = _prompts([[5, 6], [8, 9], [7], [4, 4, 4]])
    uid = torch.tensor([0, 0, 1, 1])
    rollout, cut = agent_rollout(outcomes, prompts, uid, PAD, max_prompt=6, max_response=6)
    assert cut == {"prompt_truncated": 1, "response_truncated": 1}
    # prompts: the first rendering (a's is longer than its dataset prompt: the agent's own system prompt, say);
    # masked-out rows keep their dataset prompt; left-padded to the longest, 3
    assert rollout.prompts.input_ids.tolist() == [[5, 6, 7], [PAD, PAD, 8], [PAD, PAD, 7], [4, 4, 4]]
    assert rollout.prompts.attention_mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 1], [1, 1, 1]]
    # responses: a's 6 tokens (the trailing 22 dropped, so a is not cut) and b's first 6: T = 6
    assert rollout.response_ids.tolist() == [[10, 11, 20, 21, 12, 13], [30, 31, 32, 33, 34, 35], [PAD] * 6, [PAD] * 6]
    assert rollout.response_mask.tolist() == [[1, 1, 0, 0, 1, 1], [1] * 6, [0] * 6, [0] * 6]
    assert rollout.response_attention_mask.tolist() == [[1] * 6, [1] * 6, [0] * 6, [0] * 6]
    assert rollout.rollout_log_probs[0].tolist() == pytest.approx([-.1, -.2, 0, 0, -.3, -.4])
    assert rollout.rollout_log_probs[1].tolist() == [-0.5] * 6
    assert rollout.uid.tolist() == [0, 0, 1, 1]
    # the sequences a forward sees: [left-padded prompt | right-padded response]
    assert rollout.sequences().input_ids[0].tolist() == [5, 6, 7, 10, 11, 20, 21, 12, 13]


def test_a_call_less_agent_and_a_timeout_are_masked_out_rows():
    outcomes = [AgentOutcome(OK, None), AgentOutcome(TIMEOUT, _seg([1], [2], [1]), error="timed out after 2s")]
    rollout, cut = agent_rollout(outcomes, _prompts([[3, 4], [5]]), torch.tensor([0, 0]), PAD, 8, 8)
    assert rollout.response_mask.tolist() == [[0], [0]] and rollout.response_ids.tolist() == [[PAD], [PAD]]
    assert rollout.prompts.input_ids.tolist() == [[3, 4], [PAD, 5]]
    assert cut == {"prompt_truncated": 0, "response_truncated": 0}


def test_returned_fields_are_merged_into_the_row():
    out = AgentOutcome(OK, _seg([1], [2], [1]), fields={"answer": "42", "ground_truth": 7, "data_source": "calc"})
    rollout, _ = agent_rollout([out], _prompts([[1]]), torch.tensor([0]), PAD, 8, 8)
    p = rollout.prompts
    assert (p.data_source, p.ground_truth) == (["calc"], ["7"])
    assert p.extra_info == [{"split": "train", "tag": 0, "answer": "42"}]
    assert merged_row("a", "1", {"x": 1}, {}) == ("a", "1", {"x": 1})


@pytest.mark.parametrize("value,expected", [
    (1, (1.0, {})), (0.25, (0.25, {})), (None, (None, {})), ({"answer": "42"}, (None, {"answer": "42"})),
    ({"reward": 1.0, "x": 2}, (None, {"reward": 1.0, "x": 2})),
])
def test_the_reward_rule(value, expected):
    assert returned_reward(value) == expected


@pytest.mark.parametrize("value,says", [(True, "bool"), (math.nan, "finite"), ("1.0", "str"), ([1.0], "list"),
                                        ({1: "a"}, "non-string keys")])
def test_what_is_not_a_reward_says_why(value, says):
    with pytest.raises(ValueError, match=says):
        returned_reward(value)


class _Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def test_the_final_text_is_the_last_generated_turn():
    a = _seg([5], [10, 11, 20, 12, 13], [1, 1, 0, 1, 1])
    rollout, _ = agent_rollout([AgentOutcome(OK, a), AgentOutcome(ERROR, a)], _prompts([[5], [5]]),
                               torch.tensor([0, 0]), PAD, 8, 8)
    assert final_texts(rollout, _Tok()) == ["12 13", ""]


class _Manager:
    """A reward manager that scores 1 when the text equals the row's ground truth, and remembers its calls."""

    def __init__(self):
        self.calls = []

    def score(self, rollout, texts):
        self.calls.append((list(rollout.prompts.ground_truth), list(texts)))
        scores = torch.tensor([float(t == g) for t, g in zip(texts, rollout.prompts.ground_truth)])
        n = len(texts)
        return RewardOutput(scores, scores - 0.1, torch.full((n,), -0.1), torch.zeros(n, dtype=torch.bool),
                            {"acc": scores}, [{"pred": t} for t in texts])


def test_a_number_is_the_reward_and_fields_go_to_the_reward_function_on_the_final_turn():
    seg = _seg([5], [10, 11, 20, 12], [1, 1, 0, 1])  # final turn: [12]
    outcomes = [AgentOutcome(OK, seg, reward=0.75),  # the agent's own reward: the function is not called for it
                AgentOutcome(OK, seg, fields={"ground_truth": "12"}),  # its row's "11" replaced: "12" == "12" -> 1
                AgentOutcome(OK, seg),  # returned None: scored against its own row's ground truth, "12" -> 1
                AgentOutcome(ERROR, seg, error="RuntimeError: x")]  # no signal: 0, never scored
    prompts = _prompts([[5]] * 4)
    rollout, _ = agent_rollout(outcomes, prompts, torch.tensor([0, 0, 0, 0]), PAD, 8, 8)
    manager = _Manager()
    out = agent_rewards(manager, rollout, outcomes, final_texts(rollout, _Tok()))
    assert manager.calls == [(["12", "12"], ["12", "12"])]  # rows 1 and 2 only, on their final turns
    assert out.scores.tolist() == [0.75, 1.0, 1.0, 0.0]
    assert out.rewards.tolist() == pytest.approx([0.75, 0.9, 0.9, 0.0])  # the function's shaping on its rows only
    assert out.overlong_penalty.tolist() == pytest.approx([0.0, -0.1, -0.1, 0.0])
    assert out.extras["acc"].tolist() == [0.0, 1.0, 1.0, 0.0]  # 0 on the rows it did not score
    assert [d.get("reward_from") for d in out.details] == ["agent", "reward function", "reward function", None]
    assert out.details[3] == {"agent": ERROR, "agent_error": "RuntimeError: x"}


def test_the_agent_metrics():
    seg = _seg([5], [10], [1])
    outcomes = [AgentOutcome(OK, seg, turns=2, duration_s=0.5), AgentOutcome(OK, None, turns=0, duration_s=0.1),
                AgentOutcome(ERROR, seg, turns=1, duration_s=0.2), AgentOutcome(TIMEOUT, None, turns=0, duration_s=2.0)]
    m = agent_metrics(outcomes, {"limit_hits": 1, "malformed_tool_calls": 2}, {"response_truncated": 1})
    assert m == {"agent/turns/mean": 0.75, "agent/turns/max": 2.0, "agent/errors": 1.0, "agent/timeouts": 1.0,
                 "agent/no_calls": 1.0, "agent/duration_s/max": 2.0, "agent/limit_hits": 1.0,
                 "agent/malformed_tool_calls": 2.0, "agent/response_truncated": 1.0}


def test_the_row_an_agent_gets():
    row = agent_row(_prompts([[1], [2]]), 1)
    assert row == {"prompt": [{"role": "user", "content": "q1"}], "data_source": "arith",
                   "reward_model": {"ground_truth": "11"}, "extra_info": {"split": "train", "tag": 1}, "index": 101,
                   "split": "train", "tag": 1}
