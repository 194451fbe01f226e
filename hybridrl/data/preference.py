"""Preference pairs for reward-model training, tokenized once.

Row layouts (TRL's preference datasets, explicit prompt):
  conversational: prompt = [{role, content}, ...], chosen = rejected-layout = [{"role": "assistant", "content": ...}]
  standard:       prompt = "text" (taken as one user message), chosen = "text", rejected = "text"
and an optional numeric margin column. A file without the prompt column is read in TRL's implicit-prompt
layout: chosen and rejected are whole conversations, the messages they share at the start are the
prompt and each ends with its own assistant message. Plain-string rows without a prompt are refused:
where the prompt ends is a guess there (two answers that begin alike would move their shared start
into the prompt). Each response is tokenized exactly as the RL trainer's
token-in reward-model path sees a generated one: the chat-templated prompt with its generation
prompt, then the response tokens and EOS. So the score read during training is the score the
RL run reads (workers/reward_model.py scores the last real token of that sequence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.data.dataset import encode_prompts, is_message, read_rows, require_whole_text
from hybridrl.errors import DataError


@dataclass(frozen=True)
class PreferenceColumns:
    """The columns of a preference file, as named by the config (data.*_key)."""

    prompt: str = "prompt"
    chosen: str = "chosen"
    rejected: str = "rejected"
    margin: str = "margin"


@dataclass(frozen=True)
class PreferencePair:
    prompt_ids: list[int]  # chat-templated prompt, generation prompt included
    chosen_ids: list[int]  # preferred response tokens + EOS
    rejected_ids: list[int]  # dispreferred response tokens + EOS
    margin: float  # m in -log sigmoid(r_c - r_r - m); 0 without a margin column


@dataclass
class PreferenceBatch:
    """B pairs as one forward: chosen and rejected sequences stacked, so both go through the model together."""

    input_ids: Tensor  # [2B, L] rows 0..B-1 prompt + chosen + EOS, rows B..2B-1 prompt + rejected + EOS; right-padded
    attention_mask: Tensor  # [2B, L] 1 on real tokens
    margin: Tensor  # [B] float

    @property
    def num_pairs(self) -> int:
        return len(self.margin)


def prompt_messages(value, column: str, where: str) -> list[dict]:
    """A row's prompt as chat messages: a string is one user message."""
    if isinstance(value, str) and value.strip():
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(is_message(m) for m in value):
        return value
    raise DataError(f"{where}: column {column!r} must be a non-empty string or a non-empty list of "
                    f"{{'role': str, 'content': str}} chat messages, got {str(value)[:80]!r}")


def response_text(value, column: str, where: str) -> str:
    """A response: a non-empty string, or a list of exactly one assistant message."""
    if isinstance(value, list) and len(value) == 1 and is_message(value[0]) and value[0]["role"] == "assistant":
        value = value[0]["content"]
    elif isinstance(value, list):
        raise DataError(f"{where}: column {column!r} must hold one assistant message [{{'role': 'assistant', "
                        f"'content': ...}}] (the prompt's turns go in the prompt column), got {str(value)[:80]!r}")
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: column {column!r} must be a non-empty response (a string or one assistant "
                        f"message), got {str(value)[:80]!r}")
    return value


def shared_prefix_len(a: list[dict], b: list[dict]) -> int:
    """How many leading messages two conversations share (same role and content)."""
    n = 0
    while n < min(len(a), len(b)) and (a[n]["role"], a[n]["content"]) == (b[n]["role"], b[n]["content"]):
        n += 1
    return n


IMPLICIT_FIX = ("set data.prompt_key to the column holding the prompts, or begin both conversations with the "
                "prompt's messages")


def _implicit_layout(c: PreferenceColumns, where: str) -> str:
    """The start of every implicit-prompt error: which row, and why its prompt is read from the responses."""
    return (f"{where}: no {c.prompt!r} column, so the prompt is the messages {c.chosen!r} and {c.rejected!r} "
            "begin with (TRL's implicit-prompt layout)")


def _require_conversations(chosen, rejected, c: PreferenceColumns, where: str) -> None:
    """Both values are lists of chat messages; plain strings are refused with how to convert them."""
    if isinstance(chosen, str) and isinstance(rejected, str):
        raise DataError(f"{_implicit_layout(c, where)}, but both are plain strings, where the end of the prompt "
                        f"is a guess; put the prompt in a {c.prompt!r} column and only the responses in {c.chosen!r} "
                        f"and {c.rejected!r}, or write both as lists of {{'role': str, 'content': str}} messages "
                        "that begin with the prompt's messages")
    for column, value in ((c.chosen, chosen), (c.rejected, rejected)):
        if not (isinstance(value, list) and value and all(is_message(m) for m in value)):
            raise DataError(f"{_implicit_layout(c, where)}, but {column!r} is not a list of {{'role': str, "
                            f"'content': str}} messages (got {str(value)[:60]!r}); {IMPLICIT_FIX}")


def split_shared_prompt(chosen, rejected, c: PreferenceColumns, where: str) -> tuple[list[dict], str, str]:
    """(prompt messages, chosen text, rejected text) of an implicit-prompt row: the prompt is the messages
    both conversations begin with; after it each has exactly one assistant message, its response."""
    _require_conversations(chosen, rejected, c, where)
    shared = shared_prefix_len(chosen, rejected)
    if shared == 0:
        raise DataError(f"{_implicit_layout(c, where)}, but their first messages differ, so there is no prompt; "
                        f"{IMPLICIT_FIX}")
    if shared == len(chosen) == len(rejected):
        raise DataError(f"{_implicit_layout(c, where)}, but the two conversations are identical, so there is no "
                        "response to compare; fix or delete the row")
    for column, value in ((c.chosen, chosen), (c.rejected, rejected)):
        tail = value[shared:]
        if len(tail) != 1 or tail[0]["role"] != "assistant":
            raise DataError(f"{_implicit_layout(c, where)}; after the {shared} shared message(s) {column!r} must have "
                            f"exactly one assistant message (its response), got roles {[m['role'] for m in tail]}; "
                            "make the earlier turns of both conversations the same, or give the prompt its own column")
    return (chosen[:shared], response_text(chosen[shared:], c.chosen, where),
            response_text(rejected[shared:], c.rejected, where))


def row_texts(row: dict, c: PreferenceColumns, implicit: bool, where: str) -> tuple[list[dict], str, str]:
    """(prompt messages, chosen text, rejected text) of one row of either layout."""
    require_whole_text(row, where)
    if implicit:
        return split_shared_prompt(row.get(c.chosen), row.get(c.rejected), c, where)
    return (prompt_messages(row.get(c.prompt), c.prompt, where), response_text(row.get(c.chosen), c.chosen, where),
            response_text(row.get(c.rejected), c.rejected, where))


def margin_of(row: dict, column: str, has_column: bool, where: str) -> float:
    if not has_column:
        return 0.0
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(f"{where}: column {column!r} must be a finite number in every row of this file, got "
                        f"{value!r}; fill it in, or rename the column to train without margins")
    return float(value)


class PreferenceDataset:
    """All pairs of the given files. `key` names the config key of the files in errors; `num_identical`
    counts pairs whose two responses are the same tokens (no signal: their gradients cancel)."""

    def __init__(self, files: list[str], tokenizer, columns: PreferenceColumns, max_length: int, key: str):
        if not files:
            raise DataError(f"{key} is empty; give at least one parquet or jsonl file of preference pairs")
        self.pairs: list[PreferencePair] = []
        for path in files:
            self.pairs += self._read(path, tokenizer, columns, max_length, key)
        self.num_identical = sum(p.chosen_ids == p.rejected_ids for p in self.pairs)
        if self.num_identical == len(self.pairs):
            raise DataError(f"{key}: in every row {columns.chosen!r} and {columns.rejected!r} are the same response, "
                            "so there is no preference to learn; check that the two columns are not one column twice")

    @staticmethod
    def _read(path: str, tokenizer, c: PreferenceColumns, max_length: int, key: str) -> list[PreferencePair]:
        fix = "set data.{} to the column holding {}"
        rows = read_rows(path, key, {c.chosen: fix.format("chosen_key", "the preferred responses"),
                                     c.rejected: fix.format("rejected_key", "the dispreferred responses")})
        implicit = not any(c.prompt in r for r in rows)  # no prompt column: the prompt is chosen's and rejected's start
        has_margin = any(c.margin in r for r in rows)
        where = [f"{path} row {i}" for i in range(len(rows))]
        texts = [row_texts(r, c, implicit, w) for r, w in zip(rows, where)]
        prompts = encode_prompts(tokenizer, [prompt for prompt, _, _ in texts])
        pairs = []
        for row, (_, *responses), p_ids, w in zip(rows, texts, prompts, where):
            ids = {}
            for column, text in zip((c.chosen, c.rejected), responses):
                ids[column] = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                if len(p_ids) + len(ids[column]) > max_length:
                    raise DataError(f"{w}: prompt ({len(p_ids)} tokens) + {column} response and EOS "
                                    f"({len(ids[column])}) is {len(p_ids) + len(ids[column])} tokens, over "
                                    f"data.max_length={max_length}; raise data.max_length or shorten the row")
            pairs.append(PreferencePair(p_ids, ids[c.chosen], ids[c.rejected], margin_of(row, c.margin, has_margin, w)))
        return pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def longest(self) -> int:
        """Tokens of the longest prompt + response of any pair."""
        return max(len(p.prompt_ids) + max(len(p.chosen_ids), len(p.rejected_ids)) for p in self.pairs)

    def collate(self, indices: list[int], pad_id: int) -> PreferenceBatch:
        pairs = [self.pairs[i] for i in indices]
        seqs = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # [2B, L]
        attn = torch.zeros((len(seqs), width), dtype=torch.long)  # [2B, L]
        for b, seq in enumerate(seqs):
            ids[b, :len(seq)] = torch.tensor(seq)
            attn[b, :len(seq)] = 1
        return PreferenceBatch(ids, attn, torch.tensor([p.margin for p in pairs], dtype=torch.float32))

