"""The agent barrier: one engine call per turn for k agents, rows ordered by agent index, an agent that leaves
(finished, raised, hung and timed out) never blocks the others."""

from __future__ import annotations

import asyncio

from hybridrl.rollout.agent.batcher import Batcher


class FakeEngine:
    def __init__(self):
        self.batches = []

    def __call__(self, prompts, agents, max_new):
        self.batches.append(list(agents))
        return [([p[-1] + 1], [-0.25]) for p in prompts]  # the next id after the prompt's last


async def two_turns(b: Batcher, agent: int, delay: float) -> list[int]:
    await asyncio.sleep(delay)  # requests arrive out of agent order
    ids, _ = await b.generate(agent, [agent * 10], 4)
    ids2, lps = await b.generate(agent, [agent * 10] + ids, 4)
    b.leave(agent)
    return ids + ids2


def test_k_agents_two_turns_make_two_engine_calls_in_agent_order():
    engine = FakeEngine()

    async def main():
        b = Batcher(engine, 3)
        return await asyncio.gather(*(two_turns(b, a, d) for a, d in [(0, 0.02), (1, 0.0), (2, 0.01)])), b

    outs, b = asyncio.run(main())
    assert engine.batches == [[0, 1, 2], [0, 1, 2]] and b.calls == 2
    assert outs == [[1, 2], [11, 12], [21, 22]]


def test_a_failed_and_a_hung_agent_do_not_block_the_others():
    engine = FakeEngine()

    async def failing(b):
        b.leave(1)  # raised before its first request (the source calls leave in `finally`)

    async def hung(b):
        try:
            await asyncio.wait_for(asyncio.sleep(3600), timeout=0.05)
        except asyncio.TimeoutError:
            b.leave(2)

    async def main():
        b = Batcher(engine, 3)
        got = await asyncio.wait_for(asyncio.gather(two_turns(b, 0, 0.0), failing(b), hung(b)), timeout=5)
        return got[0]

    assert asyncio.run(main()) == [1, 2]
    assert engine.batches == [[0], [0]]  # the first call waited for the hung agent's timeout, not for ever


def test_a_request_sent_again_while_waiting_replaces_the_first():
    """A client that timed out at the barrier and retried: the first request is cancelled (not left waiting for
    ever), the retry is generated, in one engine call with the other agent."""
    engine = FakeEngine()

    async def main():
        b = Batcher(engine, 2)
        first = asyncio.ensure_future(b.generate(0, [5], 4))
        await asyncio.sleep(0.01)
        retry = asyncio.ensure_future(b.generate(0, [5], 4))
        await asyncio.sleep(0.01)
        other = await b.generate(1, [7], 4)
        got = await retry
        try:
            await first
        except asyncio.CancelledError:
            return got, other, "cancelled"
        return got, other, "answered"

    assert asyncio.run(main()) == (([6], [-0.25]), ([8], [-0.25]), "cancelled")
    assert engine.batches == [[0, 1]]
