"""Typed containers passed between stages, with shape and meaning on every field.

N counts responses (prompts x rollout.n), P the padded prompt length, T the padded
response length. Prompts are left-padded and responses right-padded, so a sequence reads
[pad ... prompt | response ... pad].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, TypeVar

import torch
from torch import Tensor

B = TypeVar("B")


@dataclass
class PromptBatch:
    input_ids: Tensor  # [B, P] prompt token ids, left-padded with the pad id
    attention_mask: Tensor  # [B, P] 1 on prompt tokens, 0 on padding
    data_source: list[str]  # [B] picks the reward scorer
    ground_truth: list[str]  # [B] reference answer handed to the scorer
    index: list[int]  # [B] row of the prompt in its dataset
    extra_info: Optional[list[dict]] = None  # [B] the row's extra_info, handed to reward functions
    messages: Optional[list[list[dict]]] = None  # [B] the chat messages (verl's raw_prompt), for a reward model
    columns: Optional[list[dict]] = None  # [B] the row's dataset columns but its prompt (TRL-style reward kwargs)

    def repeat_interleave(self, n: int) -> "PromptBatch":
        """Each prompt n times in a row: rows i*n .. i*n+n-1 are the samples of prompt i."""
        idx = torch.arange(len(self.index)).repeat_interleave(n)
        return select(self, idx)


@dataclass
class Sequences:
    """Prompt + response token ids as one batch, the input of every log-prob/value forward."""

    input_ids: Tensor  # [N, P+T] [left-padded prompt | right-padded response]
    attention_mask: Tensor  # [N, P+T] 1 on real tokens (tool tokens of multi-turn responses included)
    response_mask: Tensor  # [N, T] 1 on generated tokens (EOS included), 0 on padding and tool tokens

    @property
    def response_ids(self) -> Tensor:  # [N, T]
        return self.input_ids[:, -self.response_mask.shape[1]:]


@dataclass
class Rollout:
    prompts: PromptBatch  # [N] one row per response (prompts repeated n times)
    response_ids: Tensor  # [N, T] sampled tokens, right-padded with the pad id
    response_mask: Tensor  # [N, T] 1 on generated tokens (EOS included), 0 after the end
    rollout_log_probs: Tensor  # [N, T] log π(a_t|s_t) at the sampling temperature, as seen by the engine; 0 on padding
    uid: Tensor  # [N] long; responses to the same prompt share a uid (GRPO groups)
    # multi-turn rollouts (rollout/multi_turn.py): [N, T] 1 on every response token, tool tokens
    # included (response_mask is 0 on them: attended to, never trained on); None: equals response_mask
    response_attention_mask: Optional[Tensor] = None
    turn_stats: Optional[dict[str, Tensor]] = None  # multi-turn: name -> [N] per-row counts (num_turns, tool calls)
    # partial rollouts (async_training.partial_rollout): [N, T] long, the policy version (optimizer step) of the
    # weights that sampled each token, -1 on padding; a response interrupted by a weight push mixes versions, and
    # rollout_log_probs holds each token's log-prob under its own version. None: not tracked
    token_versions: Optional[Tensor] = None

    def response_attention(self) -> Tensor:
        """[N, T] 1 on every real response token (generated or tool), 0 on padding."""
        return self.response_mask if self.response_attention_mask is None else self.response_attention_mask

    def sequences(self) -> Sequences:
        return Sequences(
            input_ids=torch.cat([self.prompts.input_ids, self.response_ids], dim=1),
            attention_mask=torch.cat([self.prompts.attention_mask, self.response_attention()], dim=1),
            response_mask=self.response_mask,
        )


@dataclass
class TrainBatch:
    """Everything one policy update needs."""

    seqs: Sequences  # [N, P+T]
    advantages: Tensor  # [N, T] 0 on padding
    rollout_log_probs: Tensor  # [N, T] from the rollout engine, for the mismatch metric
    old_log_probs: Optional[Tensor]  # [N, T] log π_old; None when on-policy (the update's first forward is π_old)
    ref_log_probs: Optional[Tensor]  # [N, T] log π_ref; None unless a KL loss is used
    teacher_log_probs: Optional[Tensor] = None  # [N, T] log π_teacher of the sampled tokens; None unless distilling


def _map_fields(batch: B, on_tensor, on_list) -> B:
    """A copy of `batch` with `on_tensor` applied to every tensor (also inside dicts of per-row
    tensors, and recursing into nested containers) and `on_list` to every list field."""
    values = {}
    for f in dataclasses.fields(batch):  # type: ignore[arg-type]
        v = getattr(batch, f.name)
        if isinstance(v, Tensor):
            v = on_tensor(v)
        elif isinstance(v, list):
            v = on_list(v)
        elif isinstance(v, dict):  # named per-row tensors, e.g. reward extras
            v = {k: on_tensor(t) if isinstance(t, Tensor) else t for k, t in v.items()}
        elif dataclasses.is_dataclass(v):
            v = _map_fields(v, on_tensor, on_list)
        values[f.name] = v
    return type(batch)(**values)


def select(batch: B, idx: Tensor) -> B:
    """The rows `idx` ([K] long) of every tensor and list field, recursing into containers."""
    rows = idx.tolist()
    return _map_fields(batch, lambda t: t[idx], lambda v: [v[i] for i in rows])


def to_device(batch: B, device: torch.device | str) -> B:
    """The batch with every tensor field on `device` (recursing into containers); tensors already
    there are not copied."""
    return _map_fields(batch, lambda t: t.to(device), lambda v: v)


def num_rows(batch: object) -> int:
    for f in dataclasses.fields(batch):  # type: ignore[arg-type]
        v = getattr(batch, f.name)
        if isinstance(v, (Tensor, list)):
            return len(v)
        if dataclasses.is_dataclass(v):
            return num_rows(v)
    raise ValueError(f"{type(batch).__name__} has no batched field")


def split(batch: B, size: int) -> list[B]:
    """Consecutive chunks of `size` rows (the last may be shorter)."""
    n = num_rows(batch)
    return [select(batch, torch.arange(i, min(i + size, n))) for i in range(0, n, size)]


def concat(batches: list[B]) -> B:
    """Rows of several batches of one type, in order; tensors must agree beyond the row dimension."""
    first = batches[0]
    values = {}
    for f in dataclasses.fields(first):  # type: ignore[arg-type]
        parts = [getattr(b, f.name) for b in batches]
        if isinstance(parts[0], Tensor):
            values[f.name] = torch.cat(parts)
        elif isinstance(parts[0], list):
            values[f.name] = [x for p in parts for x in p]
        elif isinstance(parts[0], dict):
            values[f.name] = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
        elif dataclasses.is_dataclass(parts[0]):
            values[f.name] = concat(parts)
        else:
            values[f.name] = parts[0]
    return type(first)(**values)


def left_pad(prompts: Sequence[list[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    """ids [N, P] left-padded with pad_id and mask [N, P] (1 on prompt tokens); P: longest prompt."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, row in enumerate(prompts):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def _pad_to(t: Tensor, width: int, value: float, left: bool) -> Tensor:
    fill = t.new_full((t.shape[0], width - t.shape[1]), value)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def concat_rollouts(rollouts: list[Rollout], pad_id: int) -> Rollout:
    """Rollouts of several generation rounds as one: prompts re-left-padded, responses
    re-right-padded to the widest, and uids shifted so groups of different rounds stay apart."""
    P = max(r.prompts.input_ids.shape[1] for r in rollouts)
    T = max(r.response_ids.shape[1] for r in rollouts)
    padded, offset = [], 0
    for r in rollouts:
        prompts = dataclasses.replace(r.prompts, input_ids=_pad_to(r.prompts.input_ids, P, pad_id, left=True),
                                      attention_mask=_pad_to(r.prompts.attention_mask, P, 0, left=True))
        attn = None if r.response_attention_mask is None else _pad_to(r.response_attention_mask, T, 0, left=False)
        versions = None if r.token_versions is None else _pad_to(r.token_versions, T, -1, left=False)
        padded.append(Rollout(prompts, _pad_to(r.response_ids, T, pad_id, left=False),
                              _pad_to(r.response_mask, T, 0, left=False), _pad_to(r.rollout_log_probs, T, 0.0, left=False),
                              r.uid + offset, attn, r.turn_stats, versions))
        offset += int(r.uid.max()) + 1 if len(r.uid) else 0
    return concat(padded)
