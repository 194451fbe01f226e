"""A step's agent trajectories as training rows: one Rollout row per agent, and the rule that turns what each agent
returned into its reward.

Row i is agent i's recorded sample (recorder.py's `sample()`, the last segment): the prompt is every token before
the first generated one (the first rendering of the conversation), the response is the rest, with response_mask 1
exactly on the tokens the engine generated (their log-probs are the engine's, so rollout correction and the
engine/trainer mismatch metrics work) and 0 on what the agent's later requests appended (tool results, user turns,
the template's headers), which the model attends to and is never trained on. Tokens after the last generated one
carry no signal and are dropped.

A response longer than data.max_response_length is cut there (a prefix of a causal sequence is still exactly what
the model saw) and counted; a prompt longer than data.max_prompt_length cannot be cut without changing what the
model saw, so that row is kept for its shape but masked out entirely, and counted. A row whose agent failed, timed
out or made no call is masked out too (response_mask all 0: no training signal from a broken trajectory).

Rewards (`returned_reward`): an agent returning a number gives that row its reward as is (the reward function is not
called for it); returning a dict (or None, an empty one) merges its fields into the row, `ground_truth` and
`data_source` into theirs and every other key into extra_info, and the run's reward function then scores the text of
the final assistant turn with them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.rollout.agent.recorder import Segment

OK, ERROR, TIMEOUT = "ok", "error", "timeout"


@dataclass
class AgentOutcome:
    """How one agent of a step ended and what it left."""

    status: str  # OK (it returned), ERROR (it raised, or returned something that is not a reward), TIMEOUT
    sample: Optional[Segment]  # its recorder's sample (the last segment); None: it made no call
    reward: Optional[float] = None  # OK and it returned a number: the row's reward
    fields: dict[str, Any] = field(default_factory=dict)  # OK and it returned a dict: merged into the row
    error: str = ""  # ERROR: `Type: message`
    turns: int = 0  # chat completions answered
    duration_s: float = 0.0

    @property
    def trains(self) -> bool:
        """Does its row carry a training signal (it returned, after at least one generated token)?"""
        return self.status == OK and self.sample is not None and any(self.sample.mask)


def returned_reward(value: Any) -> tuple[Optional[float], dict[str, Any]]:
    """(reward, fields) of an agent's return value (see the module docstring); a ValueError says why it is neither."""
    if value is None:
        return None, {}
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ValueError(f"returned a dict with non-string keys {bad[:3]}; use field names")
        return None, dict(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"returned {value}; return a finite reward")
        return float(value), {}
    raise ValueError(f"returned a {type(value).__name__}; return a float (the reward) or a dict of fields for the "
                     "reward function")


def merged_row(data_source: str, ground_truth: str, extra_info: dict, fields: dict[str, Any]) -> tuple[str, str, dict]:
    """(data_source, ground_truth, extra_info) of a row after an agent's returned `fields` are merged in."""
    info = dict(extra_info)
    for key, value in fields.items():
        if key == "data_source":
            data_source = str(value)
        elif key == "ground_truth":
            ground_truth = str(value)
        else:
            info[key] = value
    return data_source, ground_truth, info


@dataclass
class _Row:
    prompt: list[int]
    response: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)


def _split(seg: Segment, max_prompt: int, max_response: int, counts: dict[str, int]) -> Optional[_Row]:
    """The sample as (prompt, response); None when it cannot be trained on (its prompt is over max_prompt)."""
    first = seg.mask.index(1)
    last = len(seg.mask) - seg.mask[::-1].index(1)  # one past the last generated token
    prompt = seg.prompt_ids + seg.tokens[:first]
    if len(prompt) > max_prompt:
        counts["prompt_truncated"] += 1
        return None
    end = min(last, first + max_response)
    counts["response_truncated"] += int(end < last)
    return _Row(prompt, seg.tokens[first:end], seg.mask[first:end], seg.log_probs[first:end])


def agent_rows(outcomes: list[AgentOutcome], prompts: PromptBatch, max_prompt: int, max_response: int
               ) -> tuple[list[_Row], dict[str, int]]:
    """Per agent its row (the dataset prompt and an empty response when it carries no signal); counts of
    prompt_truncated / response_truncated rows."""
    counts = {"prompt_truncated": 0, "response_truncated": 0}
    rows = []
    for i, out in enumerate(outcomes):
        row = _split(out.sample, max_prompt, max_response, counts) if out.trains else None
        if row is None:  # masked out: the dataset prompt keeps the shapes within the configured lengths
            row = _Row(prompts.input_ids[i][prompts.attention_mask[i].bool()].tolist()[-max_prompt:])
        rows.append(row)
    return rows, counts


def agent_rollout(outcomes: list[AgentOutcome], prompts: PromptBatch, uid: torch.Tensor, pad_id: int,
                  max_prompt: int, max_response: int) -> tuple[Rollout, dict[str, int]]:
    """The step's Rollout, row i agent i's (`prompts`: the dataset rows the agents were given, [N], one per agent),
    with the returned fields merged into each row; and the truncation counts."""
    rows, counts = agent_rows(outcomes, prompts, max_prompt, max_response)
    P, T = max(len(r.prompt) for r in rows), max(1, max(len(r.response) for r in rows))
    ids = torch.full((len(rows), P), pad_id, dtype=torch.long)  # [N, P] left-padded
    attn = torch.zeros((len(rows), P), dtype=torch.long)
    resp = torch.full((len(rows), T), pad_id, dtype=torch.long)  # [N, T] right-padded
    mask, real = torch.zeros((len(rows), T), dtype=torch.long), torch.zeros((len(rows), T), dtype=torch.long)
    lps = torch.zeros((len(rows), T), dtype=torch.float32)
    for i, r in enumerate(rows):
        ids[i, P - len(r.prompt):], attn[i, P - len(r.prompt):] = torch.tensor(r.prompt, dtype=torch.long), 1
        n = len(r.response)
        resp[i, :n], mask[i, :n], real[i, :n] = torch.tensor(r.response, dtype=torch.long), torch.tensor(r.mask), 1
        lps[i, :n] = torch.tensor(r.log_probs, dtype=torch.float32)
    merged = [merged_row(prompts.data_source[i], prompts.ground_truth[i],
                         (prompts.extra_info or [{}] * len(rows))[i], o.fields) for i, o in enumerate(outcomes)]
    batch = dataclasses.replace(prompts, input_ids=ids, attention_mask=attn, data_source=[m[0] for m in merged],
                                ground_truth=[m[1] for m in merged], extra_info=[m[2] for m in merged])
    return Rollout(batch, resp, mask, lps, uid, response_attention_mask=real), counts


def final_texts(rollout: Rollout, tokenizer) -> list[str]:
    """Per row the text of its final assistant turn (the last run of generated tokens), special tokens skipped:
    what the reward function scores. "" for a masked-out row."""
    out = []
    for ids, mask in zip(rollout.response_ids.tolist(), rollout.response_mask.tolist()):
        end = len(mask) - mask[::-1].index(1) if 1 in mask else 0
        start = end
        while start > 0 and mask[start - 1] == 1:
            start -= 1
        out.append(tokenizer.decode(ids[start:end], skip_special_tokens=True))
    return out
