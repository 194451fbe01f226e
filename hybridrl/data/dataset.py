"""RL prompt datasets in verl's parquet schema, tokenized once with the chat template.

Row schema: `data_source` (str), `<prompt_key>` (list of {role, content} messages),
`ability`, `reward_model.{style, ground_truth}`, `extra_info` (dict).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from hybridrl.batch import PromptBatch
from hybridrl.errors import DataError

TRUNCATION_MODES = ("error", "left", "right")


@dataclass
class PromptRecord:
    prompt_ids: list[int]  # chat-templated prompt, generation prompt included
    data_source: str
    ground_truth: str
    index: int  # row across all files, in file order
    extra_info: dict  # the row's extra_info ({} when absent), passed to reward functions


def _read_jsonl(path: str, key: str) -> tuple[list[dict], list[str]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{key}: {path} line {line_no} is not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{key}: {path} line {line_no} is a JSON {type(row).__name__}, not an object")
            rows.append(row)
    columns = sorted({c for r in rows for c in r})
    return rows, columns


def read_parquet_rows(path: str, key: str, required: tuple[str, ...]) -> list[dict]:
    """Rows of one parquet (or .jsonl) file as dicts; `key` names the config key in errors."""
    if not os.path.isfile(path):
        hint = " (create it with `hybridrl data arithmetic --output data/arithmetic`)" if "arithmetic" in path else ""
        raise DataError(f"{key}: file not found: {path}{hint}")
    if path.endswith(".jsonl"):
        rows, columns = _read_jsonl(path, key)
    else:
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise DataError(f"{key}: {path} is not a readable parquet file ({str(e).splitlines()[0]})") from None
        rows, columns = table.to_pylist(), table.column_names
    missing = [c for c in required if c not in columns]
    if missing:
        raise DataError(
            f"{path}: no column {missing[0]!r} (columns: {', '.join(columns)}); "
            + ("set data.prompt_key to the column holding the chat messages" if missing[0] == required[0]
               else "write rows in verl's schema (data_source, prompt, reward_model.ground_truth)")
        )
    return rows


def messages_of(row: dict, prompt_key: str, path: str, i: int) -> list[dict]:
    messages = row[prompt_key]
    ok = isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    )
    if not ok:
        raise DataError(
            f"{path} row {i}: column {prompt_key!r} must be a non-empty list of {{'role': str, 'content': str}} "
            f"chat messages, got {str(messages)[:80]!r}"
        )
    return messages


def ground_truth_of(row: dict, path: str, i: int) -> str:
    rm = row["reward_model"]
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        raise DataError(f"{path} row {i}: reward_model.ground_truth is missing")
    return str(rm["ground_truth"])


def encode_prompts(tokenizer, conversations: list[list[dict]]) -> list[list[int]]:
    """Apply the chat template (with the generation prompt) and tokenize, without extra BOS."""
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


class RLDataset:
    """All prompts of the given files, tokenized; overlong prompts handled per `truncation`."""

    def __init__(self, files: list[str], tokenizer, prompt_key: str, max_prompt_length: int,
                 truncation: str = "error", filter_overlong_prompts: bool = False, key: str = "data.train_files",
                 max_samples: int = -1):
        if not files:
            raise DataError(f"{key} is empty; give at least one parquet file")
        self.records: list[PromptRecord] = []
        self.num_filtered = 0
        taken = 0
        for path in files:
            rows = read_parquet_rows(path, key, required=(prompt_key, "data_source", "reward_model"))
            if max_samples >= 0:  # the first max_samples rows over all files, in order
                rows = rows[:max_samples - taken]
                taken += len(rows)
            ids = encode_prompts(tokenizer, [messages_of(r, prompt_key, path, i) for i, r in enumerate(rows)])
            for i, (row, prompt_ids) in enumerate(zip(rows, ids)):
                if len(prompt_ids) > max_prompt_length:
                    if filter_overlong_prompts:
                        self.num_filtered += 1
                        continue
                    prompt_ids = self._truncate(prompt_ids, max_prompt_length, truncation, path, i)
                self.records.append(PromptRecord(prompt_ids, str(row["data_source"]), ground_truth_of(row, path, i),
                                                 len(self.records) + self.num_filtered, row.get("extra_info") or {}))
        if not self.records:
            raise DataError(f"{key}: no prompts left (all {self.num_filtered} are over data.max_prompt_length={max_prompt_length})")

    @staticmethod
    def _truncate(ids: list[int], limit: int, mode: str, path: str, i: int) -> list[int]:
        if mode == "left":
            return ids[-limit:]
        if mode == "right":
            return ids[:limit]
        raise DataError(
            f"{path} row {i}: prompt is {len(ids)} tokens, over data.max_prompt_length={limit}; raise "
            f"data.max_prompt_length, or set data.filter_overlong_prompts=true or data.truncation=left|right"
        )

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
                           [r.index for r in recs], [r.extra_info for r in recs])
