"""One step of agents through the run's proxy server (rollout/agent/server.py) with the real openai client and a
stand-in engine call: an agent that raises, one that hangs, one that makes no call and one that hits the turn limit
in the same step never block the agent that works, and each ends as it should; a second step is served by the same
server under a new prefix, and a request to the first step's prefix is refused."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from hybridrl.models.tiny import build_tokenizer
from hybridrl.rollout.agent.proxy import AgentLimits
from hybridrl.rollout.agent.rows import ERROR, OK, TIMEOUT
from hybridrl.rollout.agent.server import ProxyServer

TURN = [81, 77, 2]  # "ok" and EOS, every turn
LP = [-0.25, -0.5, -0.125]


@pytest.fixture
def server():
    s = ProxyServer(build_tokenizer(), AgentLimits(max_turns=2, max_tokens=50))
    s.start()
    yield s
    s.close()


def engine(calls: list):
    def call(prompts, agents, max_new):
        calls.append((list(agents), [list(p) for p in prompts]))
        return [(TURN[:m], LP[:m]) for m in max_new]
    return call


async def agent(client, row):
    kind = row["kind"]
    if kind == "hang":
        await asyncio.sleep(60)
    if kind == "none":
        return {"answer": "x"}
    messages = [{"role": "user", "content": "hi"}]
    for turn in range(3 if kind == "greedy" else 2):
        try:
            r = await client.chat.completions.create(model="policy", messages=messages)
        except openai.BadRequestError:
            return 0.5  # the turn limit: the agent stops and says how it did
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "again"}]
        if kind == "raise":
            raise RuntimeError("tool broke")
    return 1.0


def test_failures_in_one_step_are_counted_and_never_block_the_rest(server):
    calls = []
    rows = [{"kind": k} for k in ("work", "raise", "hang", "none", "greedy")]
    outcomes, counts = server.run(agent, rows, engine(calls), timeout_s=1.0)
    assert [o.status for o in outcomes] == [OK, ERROR, TIMEOUT, OK, OK]
    assert outcomes[1].error == "RuntimeError: tool broke"
    assert [o.turns for o in outcomes] == [2, 1, 0, 0, 2]
    assert [o.reward for o in outcomes] == [1.0, None, None, None, 0.5]
    assert outcomes[3].fields == {"answer": "x"} and outcomes[3].sample is None
    assert counts.limit_hits == 1  # the greedy agent's third request
    assert 1.0 <= outcomes[2].duration_s < 1.0 + 5.0
    # turn 1: every live agent but the hung one asked; the barrier waited for it to time out (or leave)
    assert [a for a, _ in calls] == [[0, 1, 4], [0, 4]]
    # the working agent's sample: two generated turns exactly as the engine gave them, the appended user turn 0
    seg = outcomes[0].sample
    tok = server.tokenizer
    assert seg.prompt_ids == tok(tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                         add_generation_prompt=True), add_special_tokens=False).input_ids
    assert calls[0][1][0] == seg.prompt_ids and calls[1][1][1] == seg.context()[:len(calls[1][1][1])]
    first, second = seg.tokens[:3], seg.tokens[-3:]
    assert first == TURN == second and seg.mask[:3] == [1, 1, 1] == seg.mask[-3:]
    assert seg.log_probs[:3] == LP and set(seg.mask[3:-3]) == {0} and len(seg.mask) > 6


def test_the_next_step_has_its_own_prefix_and_the_old_one_is_refused(server):
    calls = []
    server.run(agent, [{"kind": "work"}], engine(calls), timeout_s=5.0)
    old = server.url(0)
    outcomes, _ = server.run(agent, [{"kind": "work"}, {"kind": "work"}], engine(calls), timeout_s=5.0)
    assert [o.turns for o in outcomes] == [2, 2] and server.url(0) != old
    late = httpx.post(f"{old}/chat/completions", json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
    assert late.status_code == 404 and "not an agent of the current rollout step" in late.json()["error"]["message"]


def test_the_proxy_listens_on_loopback_only_and_serves_nothing_but_its_routes(server):
    """Issue #48 part 3: the run's agent proxy is never open to other machines (it takes no --host), and has no
    FastAPI docs or schema pages."""
    host = server.server.servers[0].sockets[0].getsockname()[0]
    assert host == "127.0.0.1"
    base = f"http://127.0.0.1:{server.port}"
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(base + path).status_code == 404, path
