"""The barrier that batches the chat requests of the agents in flight into one engine call.

Each live agent either has one pending request or is running its own code (tools, parsing). When every live agent
has a pending request (or has finished, failed or timed out: `leave`), the pending prompts go to the engine in one
call, ordered by agent index, so the batch, and with keyed sampling each response, is the same on every run with a
seed whatever the order the requests arrived in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

# (prompts: per row the prompt ids, agents: per row the agent index, max_new_tokens: per row) ->
# per row (generated ids, their log-probs); called on a worker thread, so the event loop keeps serving
EngineCall = Callable[[list[list[int]], list[int], list[int]], list[tuple[list[int], list[float]]]]


@dataclass
class _Pending:
    prompt: list[int]
    max_new_tokens: int
    future: asyncio.Future


class Batcher:
    """Batches the requests of agents 0 .. num_agents-1 (all live at the start); one instance per rollout."""

    def __init__(self, engine_call: EngineCall, num_agents: int):
        self.engine_call = engine_call
        self.live = set(range(num_agents))
        self.pending: dict[int, _Pending] = {}
        self.calls = 0  # engine calls made (one per barrier)
        self._running = False

    async def generate(self, agent: int, prompt: list[int], max_new_tokens: int) -> tuple[list[int], list[float]]:
        """Agent `agent`'s completion of `prompt`, once every live agent has asked (or left)."""
        if agent not in self.live:
            raise RuntimeError(f"agent {agent} has left this rollout (finished, failed or timed out)")
        future = asyncio.get_running_loop().create_future()
        superseded = self.pending.get(agent)
        if superseded is not None and not superseded.future.done():
            # the agent's client gave up on its waiting request (a timeout) and sent it again: the first would
            # otherwise wait for ever and hold its connection, so it is cancelled and the new one takes its place
            superseded.future.cancel()
        self.pending[agent] = _Pending(prompt, max_new_tokens, future)
        self._maybe_flush()
        return await future

    def leave(self, agent: int) -> None:
        """Agent `agent` will send no more requests (it returned, raised or timed out)."""
        self.live.discard(agent)
        dropped = self.pending.pop(agent, None)
        if dropped is not None and not dropped.future.done():
            dropped.future.cancel()
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self._running or not self.pending or set(self.pending) < self.live:
            return
        batch = sorted(self.pending.items())  # by agent index: reproducible whatever the arrival order
        self.pending = {}
        self._running = True
        asyncio.get_running_loop().create_task(self._flush(batch))

    async def _flush(self, batch: list[tuple[int, _Pending]]) -> None:
        agents = [a for a, _ in batch]
        try:
            outs = await asyncio.get_running_loop().run_in_executor(
                None, self.engine_call, [p.prompt for _, p in batch], agents, [p.max_new_tokens for _, p in batch])
            self.calls += 1
            for (_, p), out in zip(batch, outs):
                if not p.future.done():
                    p.future.set_result(out)
        except Exception as e:  # every waiting agent sees the engine's error
            for _, p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
        finally:
            self._running = False
            self._maybe_flush()  # requests that arrived during the call
