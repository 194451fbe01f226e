"""A real multi-turn GRPO run: the calculator tool configured from YAML, a model warm-started on a
few tool-call rows so it calls the tool, two steps with tool turns in the trained responses."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import validate_rl_config
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.slow

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>'


def _warm_start(model_dir: str, out: str) -> str:
    """The random tiny model trained to always answer with a calculator call (a few hundred
    full-batch steps on 8 prompts): enough that sampled responses contain tool calls."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hybridrl.data.dataset import encode_prompts

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    exprs = [f"{a}+{b}" for a, b in zip(range(11, 19), range(31, 39))]
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


def test_two_multi_turn_grpo_steps_with_the_calculator(random_model_dir, tmp_path):
    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"What is {a}+{b}?"}],
             "reward_model": {"ground_truth": str(a + b)}} for a, b in zip(range(11, 19), range(31, 39))]
    data = str(tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows), data)
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    model = _warm_start(random_model_dir, str(tmp_path / "warm"))
    cfg = load_config(RLConfig, None, [
        f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4",
        "data.max_response_length=150", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.n=4",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
        "actor_rollout_ref.rollout.temperature=0.5",
        "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path / 'run'}",
        f"trainer.rollout_data_dir={tmp_path / 'gens'}"])
    run = build_run(cfg, validate_rl_config(cfg), log=lambda *_: None)
    RLTrainer(run).fit()
    records = [json.loads(line) for line in open(run.tracker.path)][1:]
    assert len(records) == 2
    for r in records:
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())
        assert {"num_turns/mean", "num_turns/max", "tool_call_counts/mean", "tool_call_counts/calculator",
                "tool_errors/malformed", "tool_errors/timeout"} <= set(r)
        # the engine's and the trainer's probabilities agree on model tokens (tool tokens excluded)
        assert r["training/rollout_probs_diff_max"] < 1e-4
    assert sum(r["tool_call_counts/calculator"] for r in records) > 0 and max(r["num_turns/max"] for r in records) == 2
    gens = [json.loads(line) for line in open(tmp_path / "gens" / "1.jsonl")]
    assert any("<tool_response>" in g["output"] for g in gens)
