"""The agent proxy with real clients on a real (tiny, tool-calling) model: the OpenAI Agents SDK runs a calculator
task through it, streamed and not; the openai client's streaming chunks; a retried request. Every recorded
trajectory is token-exact (agent_helpers.check_token_exact)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

openai = pytest.importorskip("openai", reason="the agent proxy tests drive it with the openai package")
pytestmark = pytest.mark.slow  # each module fine-tunes the fixture model (~2 s) and starts uvicorn
sys.path.insert(0, str(Path(__file__).parent))
from agent_helpers import (CALL, SDK_ANSWER, SDK_Q, SDK_RESULT, Rollout, check_token_exact, load_policy,  # noqa: E402
                           one_thread, tool_model)

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]


@pytest.fixture(scope="module")
def policy(random_model_dir, tmp_path_factory):
    with one_thread():
        yield load_policy(tool_model(random_model_dir, str(tmp_path_factory.mktemp("agent-sdk"))))


def client(rollout: Rollout, agent: int = 0):
    return openai.AsyncOpenAI(base_url=rollout.url(agent), api_key="none", max_retries=0, timeout=60)


def sdk_run(rollout: Rollout, streamed: bool):
    """The SDK's Runner on SDK_Q with a calculator function tool: (final output, the calls the tool ran)."""
    agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents)")
    agents.set_tracing_disabled(True)  # tracing would export to OpenAI's servers
    ran = []

    @agents.function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        ran.append(expression)
        a, b = expression.split("+")
        return str(int(a) + int(b))

    model = agents.OpenAIChatCompletionsModel(model="policy", openai_client=client(rollout))
    # the settings an SDK user may set: each becomes a request field the proxy must take as OpenAI would (store
    # and metadata were refused as unrecognized before AgentChatRequest); sampling fields are the run's anyway
    settings = agents.ModelSettings(temperature=0.0, tool_choice="auto", parallel_tool_calls=True,
                                    include_usage=True, store=False, metadata={"task": "calc"}, max_tokens=100)
    agent = agents.Agent(name="calc", tools=[calculator], model=model, model_settings=settings)

    async def main():
        if streamed:
            run = agents.Runner.run_streamed(agent, SDK_Q, max_turns=4)
            async for _ in run.stream_events():
                pass
            return run.final_output
        return (await agents.Runner.run(agent, SDK_Q, max_turns=4)).final_output

    try:
        return asyncio.run(main()), ran
    finally:
        rollout.batcher.leave(0)


@pytest.mark.parametrize("streamed", [False, True])
def test_the_agents_sdk_runs_a_tool_task_recorded_token_exactly(policy, streamed):
    rollout = Rollout(policy, 1)
    try:
        final, ran = sdk_run(rollout, streamed)
    finally:
        rollout.close()
    assert ran == ["1234+4321"] and final == SDK_ANSWER  # the SDK ran the model's call and got the answer
    rec, turns = rollout.recorders[0], rollout.turns[0]
    # the SDK sent the call back as OpenAI JSON (arguments re-spaced by json.dumps): matched to the raw text, so
    # the template's rendering extends the first turn and one sample holds both turns
    assert len(rec.segments) == 1 and rec.retries == 0
    check_token_exact(rec, policy.tokenizer, turns, [CALL % "1234+4321", SDK_ANSWER])
    prompt, ids, _ = turns[-1]
    assert rec.sample().context() == prompt + ids  # the sample is the tokens the model saw at its final turn
    assert rollout.counts["turns"] == [2] and rollout.batcher.calls == 2


def test_streamed_chunks_with_the_openai_client(policy):
    rollout = Rollout(policy, 1)

    async def turn(messages):
        stream = await client(rollout).chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True})
        return [c async for c in stream]

    async def main():
        user = [{"role": "user", "content": SDK_Q}]
        first = await turn(user)
        call = first[1].choices[0].delta.tool_calls[0]
        history = user + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": call.function.arguments}}]},
                          {"role": "tool", "tool_call_id": call.id, "content": SDK_RESULT}]
        return first, await turn(history)

    try:
        first, second = asyncio.run(main())
        rollout.batcher.leave(0)
    finally:
        rollout.close()
    turns = rollout.turns[0]
    # role, then the call with its finish_reason, then the usage (the [DONE] ends the client's iteration)
    assert first[0].choices[0].delta.role == "assistant" and first[0].choices[0].finish_reason is None
    delta = first[1].choices[0].delta
    assert first[1].choices[0].finish_reason == "tool_calls" and not delta.content
    assert (delta.tool_calls[0].index, delta.tool_calls[0].function.name) == (0, "calculator")
    assert json.loads(delta.tool_calls[0].function.arguments) == {"expression": "1234+4321"}
    assert first[2].choices == [] and first[2].usage.completion_tokens == len(turns[0][1])
    assert first[2].usage.prompt_tokens == len(turns[0][0]) and len(first) == 3
    assert "".join(c.choices[0].delta.content or "" for c in second if c.choices) == SDK_ANSWER
    assert second[1].choices[0].finish_reason == "stop"
    check_token_exact(rollout.recorders[0], policy.tokenizer, turns, [CALL % "1234+4321", SDK_ANSWER])
    assert len(rollout.recorders[0].segments) == 1


def test_a_retried_request_replaces_the_first_generation(policy):
    """An OpenAI client retries a request it timed out on: the proxy generates again and the second answer
    replaces the first in the record (the agent never saw the first), counted in `retries`."""
    rollout = Rollout(policy, 1)
    user = [{"role": "user", "content": SDK_Q}]

    async def main():
        c = client(rollout)
        for _ in range(2):  # the same request twice
            r = await c.chat.completions.create(model="policy", messages=user, tools=TOOLS)
        call = r.choices[0].message.tool_calls[0]
        history = user + [r.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": SDK_RESULT}]
        return (await c.chat.completions.create(model="policy", messages=history, tools=TOOLS)).choices[0]

    try:
        last = asyncio.run(main())
        rollout.batcher.leave(0)
    finally:
        rollout.close()
    rec, turns = rollout.recorders[0], rollout.turns[0]
    assert last.message.content == SDK_ANSWER and len(turns) == 3 and rec.retries == 1
    assert turns[0][0] == turns[1][0]  # the retry's prompt is the first request's: nothing appended twice
    assert len(rec.segments) == 1
    # the sample holds the retry's generation once, then the answer: the first generation is gone
    check_token_exact(rec, policy.tokenizer, turns[1:], [CALL % "1234+4321", SDK_ANSWER])
