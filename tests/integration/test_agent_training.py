"""Training through the agent proxy on the bundled tiny model (trainer/agent_source.py): real openai-client agents
doing two turns per row (the second sends back the first with a user message), an agent that raises and one that
hangs in the same batch, two steps; then one step from the CLI with actor_rollout_ref.rollout.agent.path and one from
hybridrl.train(agent=...)."""

from __future__ import annotations

import asyncio
import itertools
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
GROUPS, N = 4, 2  # prompts per step, agents per prompt
AGENT = '''
async def agent(client, row):
    messages = list(row["prompt"])
    r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
    return {"answer": r.choices[0].message.content}
'''


def overrides(arith_data, run_dir, *extra: str) -> list[str]:
    return [f"data.train_files={arith_data['train']}", "data.val_files=[]", f"data.train_batch_size={GROUPS}",
            f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={GROUPS}",
            "data.max_response_length=48", "trainer.val_before_train=false", "trainer.test_freq=0",
            "trainer.logger=[file]", "trainer.save_freq=0", f"trainer.default_local_dir={run_dir}", *extra]


def two_turn_agent():
    """Step 1: every agent answers, is asked to check, answers again. Step 2: agent 0 raises, agent 1 hangs, agent 2
    returns its own reward; the rest as in step 1 (their fields go to the reward function)."""
    calls = itertools.count()

    async def agent(client, row):
        step, j = divmod(next(calls), GROUPS * N)
        if step == 1 and j == 0:
            raise RuntimeError("the tool crashed")
        if step == 1 and j == 1:
            await asyncio.sleep(60)  # cancelled after timeout_s
        messages = list(row["prompt"])
        r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "Check your answer."}]
        r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
        if step == 1 and j == 2:
            return 1.0
        return {"answer": r.choices[0].message.content}
    return agent


def test_agents_train_token_exactly_and_failures_are_rows_without_signal(tmp_path, arith_data):
    cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path / "run", "trainer.total_training_steps=2",
                                                "actor_rollout_ref.rollout.agent.timeout_s=2"))
    run = build_run(resolve(cfg), log=lambda *_: None, agent=two_turn_agent())
    seen = capture(run)
    before = {k: v.detach().clone() for k, v in run.policy.module.named_parameters()}
    RLTrainer(run, log=lambda *_: None).fit()
    after = dict(run.policy.module.named_parameters())
    assert [k for k in before if torch.equal(before[k], after[k])] == []  # every parameter moved
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
    first, second = rows
    assert first["agent/turns/mean"] == 2.0 and first["agent/errors"] == first["agent/timeouts"] == 0
    assert (second["agent/errors"], second["agent/timeouts"], second["agent/turns/max"]) == (1.0, 1.0, 2.0)
    assert second["agent/turns/mean"] == 2.0 * (GROUPS * N - 2) / (GROUPS * N)
    for step in (1, 2):
        batch, turns = seen[step]["batch"], seen[step]["turns"]
        statuses = [d["agent"] for d in batch.reward.details]
        assert statuses == ["ok"] * (GROUPS * N) if step == 1 else ["error", "timeout"] + ["ok"] * (GROUPS * N - 2)
        for i, status in enumerate(statuses):
            if status == "ok":
                assert len(turns[i]) == 2
                check_row_is_token_exact(batch.rollout, i, turns[i])
            else:  # no training signal, reward 0
                assert batch.rollout.response_mask[i].sum() == 0 and batch.reward.rewards[i] == 0
    own = [i for i, d in enumerate(seen[2]["batch"].reward.details) if d.get("reward_from") == "agent"]
    assert own == [2] and seen[2]["batch"].reward.scores[2] == 1.0


def test_one_step_from_the_cli_with_the_agent_file(tmp_path, arith_data):
    from hybridrl.cli import main

    path = tmp_path / "my_agent.py"
    path.write_text(AGENT)
    code = main(["train", *overrides(arith_data, tmp_path / "run", "trainer.total_training_steps=1",
                                     f"actor_rollout_ref.rollout.agent.path={path}")])
    assert code == 0
    row = json.loads(open(tmp_path / "run" / "metrics.jsonl").readline())
    assert row["agent/turns/mean"] == 1.0 and row["agent/errors"] == 0 and row["response_length/mean"] > 0


def test_one_step_from_python_with_agent_equals_fn(tmp_path, arith_data):
    import hybridrl

    scope: dict = {}
    exec(AGENT, scope)
    config = {"data.train_files": [arith_data["train"]], "data.val_files": [], "data.train_batch_size": GROUPS,
              "actor_rollout_ref.rollout.n": N, "actor_rollout_ref.actor.ppo_mini_batch_size": GROUPS,
              "trainer.total_training_steps": 1, "trainer.val_before_train": False, "trainer.logger": ["file"],
              "trainer.save_freq": 0, "trainer.default_local_dir": str(tmp_path / "run")}
    run = hybridrl.train(config, agent=scope["agent"], log=lambda *_: None)
    row = json.loads(open(tmp_path / "run" / "metrics.jsonl").readline())
    assert run.summary.steps == 1 and row["agent/turns/mean"] == 1.0 and row["agent/no_calls"] == 0
