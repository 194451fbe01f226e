"""Agent rollouts on the Ray backend and with the vLLM engine: the agent source asks the policy's generate for every
completion (trainer/agent_source.py), so two Ray workers must make the batches one process makes, token for token,
and vLLM's generations must be recorded as token-exactly as hf's, with log-probs equal to the trainer's."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

sys.path.insert(0, str(Path(__file__).parent))
from agent_helpers import capture, check_row_is_token_exact  # noqa: E402

pytestmark = pytest.mark.slow
RAY_CPUS = 2  # the `cluster` fixture's size: two workers of one core each
GROUPS, N = 4, 2  # prompts per step, agents per prompt


async def agent(client, row):
    """Two turns: an answer, then asked to check it, the answer again; its reward: whether the first answer holds
    the sum (the bundled model adds 2-digit numbers, so the groups' rewards differ and the update has a signal)."""
    messages = list(row["prompt"])
    r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=16)
    first = r.choices[0].message.content
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "Check your answer."}]
    await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
    return float(row["reward_model"]["ground_truth"] in first)


def train(arith_data, run_dir, *extra: str):
    """Two steps of agent rollouts; (per step the SourceBatch and engine turns, the metrics rows)."""
    cfg = load_config(RLConfig, None, [
        f"data.train_files={arith_data['train']}", "data.val_files=[]", f"data.train_batch_size={GROUPS}",
        f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={GROUPS}",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.warmup_style=constant",
        "data.max_response_length=48", "trainer.val_before_train=false", "trainer.test_freq=0",
        "trainer.logger=[file]", "trainer.save_freq=0", "trainer.total_training_steps=2",
        f"trainer.default_local_dir={run_dir}", *extra])
    run = build_run(resolve(cfg), log=lambda *_: None, agent=agent)
    seen = capture(run)
    RLTrainer(run, log=lambda *_: None).fit()
    rows = [json.loads(line) for line in open(Path(run_dir) / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
    for step in (1, 2):
        batch, turns = seen[step]["batch"], seen[step]["turns"]
        assert [d["agent"] for d in batch.reward.details] == ["ok"] * (GROUPS * N)
        for i in range(GROUPS * N):
            assert len(turns[i]) == 2
            check_row_is_token_exact(batch.rollout, i, turns[i])
    return seen, rows


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")
def test_two_ray_workers_make_the_agents_batches_of_one_process(arith_data, tmp_path, cluster):
    local, local_rows = train(arith_data, tmp_path / "local")
    ray, ray_rows = train(arith_data, tmp_path / "ray", "trainer.backend=ray", "trainer.n_gpus_per_node=2")
    for step in (1, 2):  # step 2 samples from the updated weights: equal only if the two updates were equal
        a, b = local[step]["batch"].rollout, ray[step]["batch"].rollout
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)
        assert torch.allclose(a.rollout_log_probs, b.rollout_log_probs, atol=1e-5)
        assert torch.equal(local[step]["batch"].reward.scores, ray[step]["batch"].reward.scores)
    assert ray_rows[0]["agent/turns/mean"] == 2.0 and ray_rows[0]["actor/grad_norm"] > 0
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean"):  # step 1's update (step 2's has no signal)
        assert ray_rows[0][key] == pytest.approx(local_rows[0][key], rel=1e-4, abs=1e-6), key


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (make vllm)")
def test_agents_train_through_vllm_token_exactly(arith_data, tmp_path):
    _, rows = train(arith_data, tmp_path / "vllm", "actor_rollout_ref.rollout.name=vllm",
                       "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25")
    assert rows[0]["actor/grad_norm"] > 0
    for r in rows:
        assert r["agent/turns/mean"] == 2.0
        assert r["timing_s/update_weights"] > 0  # the engine took the new weights after each update ...
        # ... so at step 2 as at step 1 vLLM's log-probs of the recorded tokens are the trainer's (a stale engine, or
        # a row whose tokens were not those the engine generated, would be far off)
        assert r["training/rollout_probs_diff_max"] < 1e-4
