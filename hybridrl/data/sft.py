"""SFT rows: chat-message prompt + target response, tokenized; loss only on the response."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.data.dataset import PROMPT_COLUMN_FIX, encode_prompts, messages_of, read_rows, require_whole_text
from hybridrl.errors import DataError


@dataclass
class SFTBatch:
    input_ids: Tensor  # [B, L] prompt + response + EOS, right-padded
    attention_mask: Tensor  # [B, L]
    loss_mask: Tensor  # [B, L] 1 where the token is a response token to predict (EOS included)


def dotted_get(row: dict, key: str):
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class SFTDataset:
    def __init__(self, files: list[str], tokenizer, prompt_key: str, response_key: str, max_length: int, key: str):
        self.examples: list[tuple[list[int], list[int]]] = []  # (prompt ids, response ids + EOS)
        for path in files:
            top = response_key.split(".")[0]
            rows = read_rows(path, key, {prompt_key: PROMPT_COLUMN_FIX,
                                         top: "set data.response_key to the column holding the responses"})
            for i, r in enumerate(rows):
                require_whole_text(r, f"{path} row {i}")
            prompts = encode_prompts(tokenizer, [messages_of(r, prompt_key, path, i) for i, r in enumerate(rows)])
            for i, (row, p_ids) in enumerate(zip(rows, prompts)):
                response = dotted_get(row, response_key)
                if not isinstance(response, str) or not response:
                    raise DataError(f"{path} row {i}: {response_key} must be a non-empty string (set data.response_key)")
                r_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                if len(p_ids) + len(r_ids) > max_length:
                    raise DataError(f"{path} row {i}: prompt + response is {len(p_ids) + len(r_ids)} tokens, "
                                    f"over data.max_length={max_length}; raise data.max_length")
                self.examples.append((p_ids, r_ids))

    def __len__(self) -> int:
        return len(self.examples)

    def collate(self, indices: list[int], pad_id: int) -> SFTBatch:
        rows = [self.examples[i] for i in indices]
        width = max(len(p) + len(r) for p, r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        loss = torch.zeros((len(rows), width), dtype=torch.long)
        for b, (p, r) in enumerate(rows):
            ids[b, :len(p) + len(r)] = torch.tensor(p + r)
            attn[b, :len(p) + len(r)] = 1
            loss[b, len(p):len(p) + len(r)] = 1
        return SFTBatch(ids, attn, loss)

    def longest_response(self) -> int:
        return max(len(r) for _, r in self.examples)
