"""examples/agent_calc/agent.py through the proxy on the tiny tool-calling model: two agents batched turn by turn,
each runs the calculator call the model makes and returns the reward of its final answer (one row right, one whose
answer the fixture model was taught wrong), with token-exact records."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

openai = pytest.importorskip("openai", reason="the agent proxy tests drive it with the openai package")
pytestmark = pytest.mark.slow  # each module fine-tunes the fixture model (~2 s) and starts uvicorn
sys.path.insert(0, str(Path(__file__).parent))
from agent_helpers import CALC_ROWS, CALL, Rollout, check_token_exact, load_policy, one_thread, tool_model  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_calc" / "agent.py"


def load_example():
    spec = importlib.util.spec_from_file_location("agent_calc_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(expr: str) -> dict:
    a, b = map(int, expr.split("+"))
    return {"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"What is {expr}?"}],
            "reward_model": {"style": "rule", "ground_truth": str(a + b)}}


def test_the_calculator_agent_through_the_proxy(random_model_dir, tmp_path):
    example = load_example()
    with one_thread():
        policy = load_policy(tool_model(random_model_dir, str(tmp_path)))
        rollout = Rollout(policy, len(CALC_ROWS))

        async def run_all():
            async def one(i, r):
                client = openai.AsyncOpenAI(base_url=rollout.url(i), api_key="none", max_retries=0, timeout=60)
                try:
                    return await example.agent(client, r)
                finally:
                    rollout.batcher.leave(i)  # as the trainer's source does when an agent returns
            return await asyncio.gather(*(one(i, row(e)) for i, (e, _, _) in enumerate(CALC_ROWS)))

        try:
            rewards = asyncio.run(run_all())
        finally:
            rollout.close()
    # 2345+6789: the model copies the tool's 9134 (reward 1); 1111+2222: it was taught to answer 3334 after the
    # tool's 3333 (reward 0): the agent scores the final answer against the row's ground truth
    assert rewards == [1.0, 0.0]
    assert rollout.batcher.calls == 2  # both agents' turns went to the engine together: call, then answer
    for i, (expr, tool_content, answer) in enumerate(CALC_ROWS):
        rec, turns = rollout.recorders[i], rollout.turns[i]
        assert len(rec.samples()) == 1
        check_token_exact(rec, policy.tokenizer, turns, [CALL % expr, answer])
        # the tool's result, wrapped as the built-in path wraps it, is in the sample with mask 0
        seg = rec.sample()
        tool_ids = policy.tokenizer(tool_content, add_special_tokens=False)["input_ids"]
        masked = [t for t, m in zip(seg.tokens, seg.mask) if m == 0]
        assert any(masked[k:k + len(tool_ids)] == tool_ids for k in range(len(masked)))


def test_a_bad_call_is_answered_as_an_error():
    example = load_example()
    assert example.run_call("calculator", '{"expression": "2+"}').startswith("<tool_response>\nError: ")
    assert example.run_call("search", "{}") == "<tool_response>\nError: no tool named 'search'; the tool is " \
                                               "'calculator'\n</tool_response>"
    assert example.run_call("calculator", '{"expression": "12*3"}') == "<tool_response>\n36\n</tool_response>"
