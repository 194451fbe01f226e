"""A tiny model that calls the calculator, and prompts for it: shared by the multi-turn training
and multi-turn eval tests."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import torch

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>'
SUMS = list(zip(range(11, 19), range(31, 39)))  # the 8 additions a+b of the prompts


def write_sum_prompts(path: str) -> str:
    """8 rows "What is a+b?" in verl's schema (data_source arithmetic, ground truth a+b)."""
    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"What is {a}+{b}?"}],
             "reward_model": {"ground_truth": str(a + b)}} for a, b in SUMS]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def warm_start(model_dir: str, out: str) -> str:
    """The random tiny model trained to always answer with a calculator call (a few hundred
    full-batch steps on 8 prompts): enough that sampled responses contain tool calls."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hybridrl.data.dataset import encode_prompts

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    exprs = [f"{a}+{b}" for a, b in SUMS]
    prompts = encode_prompts(tok, [[{"role": "user", "content": f"What is {e}?"}] for e in exprs])
    rows = [p + tok(CALL % e, add_special_tokens=False)["input_ids"] for p, e in zip(prompts, exprs)]
    L = max(len(r) for r in rows)
    ids = torch.tensor([r + [tok.pad_token_id] * (L - len(r)) for r in rows])
    loss_mask = torch.tensor([[0] * len(p) + [1] * (len(r) - len(p)) + [0] * (L - len(r)) for p, r in zip(prompts, rows)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(120):
        logits = model(input_ids=ids, attention_mask=(loss_mask >= 0).long()).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (loss * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
