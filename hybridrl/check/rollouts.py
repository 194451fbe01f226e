"""Rows of the user's data as the run hands them to the reward manager: their prompts batched as the run batches
them, and a Rollout of given response texts. The reward check and its real-answers part (reward_answers.py)
both score through these."""

from __future__ import annotations

import torch


def _left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # [N, P]
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, width - len(s):], mask[r, width - len(s):] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask


def prompt_batch(tokenizer, rows: list[dict], prompt_key: str, reward_fn_key: str):
    """The rows' prompts as the run batches them (data/dataset.py): chat-templated, left-padded, with each row's
    data_source, ground truth and extra_info for the reward manager."""
    from hybridrl.batch import PromptBatch
    from hybridrl.data.dataset import encode_prompts

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_ids, prompt_mask = _left_pad(encode_prompts(tokenizer, [r[prompt_key] for r in rows]), pad)
    truths = [str((r.get("reward_model") or {}).get("ground_truth", "")) for r in rows]
    return PromptBatch(prompt_ids, prompt_mask, [r[reward_fn_key] for r in rows], truths, list(range(len(rows))),
                       [r.get("extra_info") or {} for r in rows], [r[prompt_key] for r in rows])


def rollout_of(tokenizer, rows: list[dict], texts: list[str], prompt_key: str, reward_fn_key: str):
    """A Rollout of `texts` answering `rows` (one response each), as the engine hands it to the reward manager:
    the chat-templated prompts, each response's tokens followed by the end-of-sequence token."""
    from hybridrl.batch import Rollout

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    responses = [ids + eos for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    width = max(1, max(len(r) for r in responses))
    response_ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [N, T] right-padded
    response_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(responses):
        response_ids[k, :len(r)], response_mask[k, :len(r)] = torch.tensor(r, dtype=torch.long), 1
    prompts = prompt_batch(tokenizer, rows, prompt_key, reward_fn_key)
    return Rollout(prompts, response_ids, response_mask, torch.zeros(response_ids.shape), torch.arange(len(rows)))
