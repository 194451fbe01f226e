"""The agent proxy driven by the official openai client (in-process ASGI transport; a fake engine): a 2-turn
agent with a tool call, the recorded sample's generated ids equal the engine's with mask 1, the rest mask 0."""

from __future__ import annotations

import asyncio
import json

import pytest

from hybridrl.models.tiny import build_tokenizer
from hybridrl.rollout.agent.batcher import Batcher
from hybridrl.rollout.agent.proxy import AgentLimits, build_app
from hybridrl.rollout.agent.recorder import Recorder

openai = pytest.importorskip("openai", reason="the agent proxy tests drive it with the openai package")
httpx = pytest.importorskip("httpx")
CALL = '<tool_call>{"name": "calc", "arguments": {"e": "2+3"}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


def test_two_turn_agent_through_the_openai_client():
    tok = build_tokenizer()
    scripted = [tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                tok("5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
    seen = []

    def engine(prompts, agents, max_new):
        seen.append(prompts[0])
        out = scripted[len(seen) - 1]
        return [(out, [-0.1 * (i + 1) for i in range(len(out))])]

    recorders, counts = [Recorder(tok)], {"turns": [0], "malformed_tool_calls": 0}
    batcher = Batcher(engine, 1)
    app = build_app(tok, batcher, recorders, AgentLimits(4, 200), counts)

    async def agent():
        client = openai.AsyncOpenAI(base_url="http://proxy/agents/0/v1", api_key="x",
                                    http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)))
        msgs = [{"role": "user", "content": "What is 2+3?"}]
        r = await client.chat.completions.create(model="policy", messages=msgs, tools=TOOLS)
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"e": "2+3"}
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "content": "5", "tool_call_id": call.id}]
        r = await client.chat.completions.create(model="policy", messages=msgs, tools=TOOLS)
        batcher.leave(0)
        return r.choices[0].message.content

    assert asyncio.run(agent()) == "5"
    seg = recorders[0].sample()
    assert seen[1] == seg.prompt_ids + seg.tokens[:len(seen[1]) - len(seg.prompt_ids)]
    generated = [t for t, m in zip(seg.tokens, seg.mask) if m]
    assert generated == scripted[0] + scripted[1]
    assert seg.tokens[:len(scripted[0])] == scripted[0] and seg.tokens[-len(scripted[1]):] == scripted[1]
    assert [lp for lp, m in zip(seg.log_probs, seg.mask) if m] == pytest.approx(
        [-0.1 * (i + 1) for i in range(len(scripted[0]))] + [-0.1 * (i + 1) for i in range(len(scripted[1]))])
    assert 0 in seg.mask and recorders[0].segments_dropped == 0 and counts["turns"] == [2]


def test_fields_an_openai_server_takes_are_accepted_the_rest_refused():
    """store and metadata (sent by the OpenAI Agents SDK) change nothing in a rollout: accepted; a field the proxy
    does not implement is still a 400 naming it, as `hybridrl serve` answers."""
    tok = build_tokenizer()
    out = tok("ok", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    batcher = Batcher(lambda prompts, agents, max_new: [(out, [-0.5] * len(out))], 1)
    app = build_app(tok, batcher, [Recorder(tok)], AgentLimits(4, 50), {"turns": [0], "malformed_tool_calls": 0})
    ask = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}

    async def post(body):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
            return await c.post("/agents/0/v1/chat/completions", json=body)

    r = asyncio.run(post({**ask, "store": True, "metadata": {"task": "calc"}}))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    r = asyncio.run(post({**ask, "reasoning_effort": "low"}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"
    for field, value in [("n", 2), ("stop", ["\n"]), ("logprobs", True)]:  # would be silently not honoured
        r = asyncio.run(post({**ask, field: value}))
        assert r.status_code == 400 and r.json()["error"]["param"] == field, field
    r = asyncio.run(post({**ask, "n": 1, "logprobs": False}))  # the defaults, written out, are fine
    assert r.status_code == 200
    r = asyncio.run(post({**ask, "metadata": {"task": 3}}))  # OpenAI's metadata values are strings
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("metadata")
