"""RL prompt datasets in verl's parquet schema, tokenized once with the chat template.

Row schema: `data_source` (str), `<prompt_key>` (list of {role, content} messages),
`ability`, `reward_model.{style, ground_truth}`, `extra_info` (dict).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from hybridrl.batch import PromptBatch
from hybridrl.errors import DataError
from hybridrl.surrogates import lone_surrogate_problem


@dataclass
class PromptRecord:
    prompt_ids: list[int]  # chat-templated prompt, generation prompt included
    data_source: str
    ground_truth: str
    index: int  # row across all files, in file order
    extra_info: dict  # the row's extra_info ({} when absent), passed to reward functions
    messages: list[dict]  # the chat messages, for a reward model with its own chat template
    columns: dict  # the row's columns but the prompt, as read (reward_model, data_source, extra_info, any other)


def _read_jsonl(path: str, key: str) -> tuple[list[dict], list[str]]:
    rows = []
    offset = 0  # bytes before the line, for a decoding error's position in the file
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:  # utf-8-sig on the first line: a byte-order mark some editors write is not part of the JSON
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{key}: {path} line {line_no} is not UTF-8 text (byte {raw[e.start]:#04x} at byte "
                                f"offset {offset + e.start} of the file); save the file as UTF-8") from None
            offset += len(raw)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{key}: {path} line {line_no} is not valid JSON ({e.msg}); fix or delete the line") from None
            if not isinstance(row, dict):
                raise DataError(f"{key}: {path} line {line_no} is a JSON {type(row).__name__}, not an object")
            rows.append(row)
    columns = sorted({c for r in rows for c in r})
    return rows, columns


def _read_parquet(path: str, key: str) -> tuple[list[dict], list[str]]:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:  # not parquet, truncated, an unsupported type
        raise DataError(f"{key}: {path} is not a readable parquet file ({str(e).splitlines()[0]}); "
                        "give a .parquet or .jsonl file") from None
    try:
        return table.to_pylist(), table.column_names
    except UnicodeDecodeError as e:  # pyarrow reads string columns unchecked; Python's decoding refuses bad UTF-8
        raise _not_utf8(table, path, key, e) from None


def _decodes(values) -> bool:
    try:
        values.to_pylist()
        return True
    except UnicodeDecodeError:
        return False


def _not_utf8(table: pa.Table, path: str, key: str, error: UnicodeDecodeError) -> DataError:
    """The error naming the row and column of a parquet string that is not UTF-8 (e.g. a lone surrogate
    encoded by a writer that does not check). Only on the error path: the bad column is decoded row by row."""
    for name in table.column_names:
        column = table.column(name)
        if _decodes(column):
            continue
        row = next(i for i in range(table.num_rows) if not _decodes(column.slice(i, 1)))
        return DataError(f"{key}: {path} row {row}: column {name!r} holds text that is not UTF-8 ({error.reason}; "
                         "often a lone surrogate, half of an emoji); rewrite the row's text as UTF-8")
    return DataError(f"{key}: {path} holds text that is not UTF-8 ({error.reason}); rewrite the file's text as UTF-8")


def file_problem(path: str, key: str) -> Optional[str]:
    """Why `path` cannot be read as a data file (a folder, or missing), naming `key`; None: it can be opened."""
    if os.path.isdir(path):
        return f"{key}: {path} is a folder; give a .parquet or .jsonl file"
    if not os.path.isfile(path):
        hint = " (create it with `hybridrl data arithmetic --output data/arithmetic`)" if "arithmetic" in path else ""
        return f"{key}: file not found: {path}{hint}"
    return None


def read_rows(path: str, key: str, required: Optional[dict[str, str]] = None) -> list[dict]:
    """Rows of one .parquet or .jsonl file as dicts; `key` names the config key (or flag) in errors.

    `required` maps each needed column to the fix when no row has it (the wrong file, or a key
    to set); a row that lacks a value is a row error, reported by the caller."""
    problem = file_problem(path, key)
    if problem:
        raise DataError(problem)
    try:
        rows, columns = _read_jsonl(path, key) if path.endswith(".jsonl") else _read_parquet(path, key)
    except OSError as e:  # unreadable: permissions, an I/O error
        raise DataError(f"{key}: cannot read {path} ({e.strerror or e})") from None
    if not rows:
        raise DataError(f"{key}: {path} has no rows; give a file with at least one row")
    for column, fix in (required or {}).items():
        if column not in columns:
            raise DataError(f"{path}: no column {column!r} (columns: {', '.join(columns)}); {fix}")
    return rows


PROMPT_COLUMN_FIX = "set data.prompt_key to the column holding the chat messages"


@dataclass(frozen=True)
class DataNames:
    """How a dataset's errors name the settings behind it: the trainer's keys (the defaults), or a
    command's flags (`hybridrl eval`)."""

    prompt_key: str = "data.prompt_key"
    reward_fn_key: str = "data.reward_fn_key"
    max_prompt_length: str = "data.max_prompt_length"
    overlong_fix: str = "raise data.max_prompt_length, or set data.filter_overlong_prompts=true or data.truncation=left|right"
    bad_row_fix: str = "Fix the row, or set data.skip_bad_rows=true to skip bad rows (their count is reported)"


TRAINER_NAMES = DataNames()


def is_message(m: object) -> bool:
    """A chat message: {'role': str, 'content': str, ...}."""
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


def row_problem(row: dict, prompt_key: str, reward_fn_key: str = "data_source",
                need_ground_truth: bool = True, names: DataNames = TRAINER_NAMES) -> Optional[str]:
    """What is wrong with one RL row, with the fix; None for a good row.

    The kinds: text no tokenizer can read (a lone surrogate), a missing key, a value of the wrong
    type, messages that are not a list, an empty prompt."""
    broken_text = lone_surrogate_problem(row)  # any column: extra_info and the truth reach logs and reward code too
    if broken_text is not None:
        return broken_text
    messages = row.get(prompt_key)
    if messages is None:
        return f"no {prompt_key!r} value; give every row its chat messages (or set {names.prompt_key})"
    if not isinstance(messages, list):
        return (f"{prompt_key!r} is a {type(messages).__name__} ({str(messages)[:40]!r}), not a list of chat messages; "
                f"write [{{'role': 'user', 'content': ...}}]")
    if not messages:
        return f"{prompt_key!r} is an empty list; give at least one message"
    for j, m in enumerate(messages):
        if not is_message(m):
            return f"{prompt_key!r} message {j} is {str(m)[:60]!r}, not {{'role': str, 'content': str}}"
    if not any(m["content"].strip() for m in messages):
        return f"{prompt_key!r} has only empty messages; give the prompt text"
    source = row.get(reward_fn_key)
    if source is None:
        return f"no {reward_fn_key!r} value; name the reward scorer of every row ({names.reward_fn_key})"
    if not isinstance(source, str) or not source:
        return f"{reward_fn_key!r} is {source!r}, not a non-empty string naming the reward scorer"
    info = row.get("extra_info")
    if info is not None and not isinstance(info, dict):
        return f"extra_info is a {type(info).__name__}, not a dict; write a dict or leave it out"
    if need_ground_truth:
        rm = row.get("reward_model")
        if not isinstance(rm, dict) or rm.get("ground_truth") is None:
            return "no reward_model.ground_truth; give each row {'reward_model': {'ground_truth': ...}}"
        if not isinstance(rm["ground_truth"], (str, int, float)):
            return f"reward_model.ground_truth is a {type(rm['ground_truth']).__name__}; write a string"
    return None


def require_whole_text(row: dict, where: str) -> None:
    """A DataError naming `where` (file and row) and the field when a string of the row holds a lone
    surrogate, for the loaders that stop at a bad row (SFT, preference pairs, `hybridrl data`)."""
    problem = lone_surrogate_problem(row)
    if problem is not None:
        raise DataError(f"{where}: {problem}")


def messages_of(row: dict, prompt_key: str, path: str, i: int) -> list[dict]:
    """The row's chat messages, or a DataError naming the file and row (SFT rows)."""
    messages = row[prompt_key]
    ok = isinstance(messages, list) and messages and all(is_message(m) for m in messages)
    if not ok:
        raise DataError(
            f"{path} row {i}: column {prompt_key!r} must be a non-empty list of {{'role': str, 'content': str}} "
            f"chat messages, got {str(messages)[:80]!r}"
        )
    return messages


def encode_prompts(tokenizer, conversations: list[list[dict]]) -> list[list[int]]:
    """Apply the chat template (with the generation prompt) and tokenize, without extra BOS."""
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


class RLDataset:
    """All prompts of the given files, tokenized; overlong prompts handled per `truncation`.

    A malformed row is an error naming file, row and fix, or, with `skip_bad_rows`, skipped
    and counted (`num_bad`, `first_bad`): never dropped silently. `names` are the settings errors
    name (the trainer's keys, or a command's flags)."""

    def __init__(self, files: list[str], tokenizer, prompt_key: str, max_prompt_length: int,
                 truncation: str = "error", filter_overlong_prompts: bool = False, key: str = "data.train_files",
                 max_samples: int = -1, reward_fn_key: str = "data_source", skip_bad_rows: bool = False,
                 need_ground_truth: bool = True, names: DataNames = TRAINER_NAMES):
        if not files:
            raise DataError(f"{key} is empty; give at least one parquet file")
        self.records: list[PromptRecord] = []
        self.num_filtered = self.num_bad = 0
        self.first_bad: Optional[str] = None  # "<file> row <i>: <problem>" of the first skipped row
        taken = offset = 0  # offset: rows in the files before this one
        for path in files:
            required = {prompt_key: f"set {names.prompt_key} to the column holding the chat messages",
                        reward_fn_key: f"set {names.reward_fn_key} to the column naming the reward scorer"}
            if need_ground_truth:
                required["reward_model"] = "write rows in verl's schema (data_source, prompt, reward_model.ground_truth)"
            rows = read_rows(path, key, required)
            good = []
            for i, r in enumerate(rows):
                if 0 <= max_samples <= taken:  # the first max_samples good rows over all files, in order
                    break
                problem = row_problem(r, prompt_key, reward_fn_key, need_ground_truth, names)
                if problem is None:
                    good.append((i, r))
                    taken += 1
                    continue
                where = f"{path} row {i}: {problem}"
                if not skip_bad_rows:
                    raise DataError(f"{where}. {names.bad_row_fix}")
                self.num_bad += 1
                self.first_bad = self.first_bad or where
            ids = encode_prompts(tokenizer, [r[prompt_key] for _, r in good]) if good else []
            for (i, row), prompt_ids in zip(good, ids):
                if len(prompt_ids) > max_prompt_length:
                    if filter_overlong_prompts:
                        self.num_filtered += 1
                        continue
                    prompt_ids = self._truncate(prompt_ids, max_prompt_length, truncation, f"{path} row {i}", names)
                rm = row.get("reward_model")
                truth = rm.get("ground_truth") if isinstance(rm, dict) else None
                self.records.append(PromptRecord(prompt_ids, row[reward_fn_key], "" if truth is None else str(truth),
                                                 offset + i, row.get("extra_info") or {}, row[prompt_key],
                                                 {k: v for k, v in row.items() if k != prompt_key}))
            offset += len(rows)
        if not self.records:
            raise DataError(f"{key}: no prompts left ({self.num_filtered} over {names.max_prompt_length}="
                            f"{max_prompt_length}, {self.num_bad} bad rows skipped)")

    @staticmethod
    def _truncate(ids: list[int], max_length: int, mode: str, where: str, names: DataNames) -> list[int]:
        if mode == "left":
            return ids[-max_length:]
        if mode == "right":
            return ids[:max_length]
        raise DataError(f"{where}: prompt is {len(ids)} tokens, over {names.max_prompt_length}={max_length}; "
                        f"{names.overlong_fix}")

    def __len__(self) -> int:
        return len(self.records)

    def collate(self, indices: list[int], pad_id: int) -> PromptBatch:
        """Left-pad the chosen prompts into a PromptBatch [B, P]."""
        recs = [self.records[i] for i in indices]
        width = max(len(r.prompt_ids) for r in recs)
        ids = torch.full((len(recs), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(recs), width), dtype=torch.long)
        for row, r in enumerate(recs):
            ids[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids):] = 1
        return PromptBatch(ids, mask, [r.data_source for r in recs], [r.ground_truth for r in recs],
                           [r.index for r in recs], [r.extra_info for r in recs], [r.messages for r in recs],
                           [r.columns for r in recs])
