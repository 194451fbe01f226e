"""The agent proxy served for a whole run, and one step's agents run through it.

`ProxyServer.start` serves proxy.py's app with uvicorn on 127.0.0.1 (a free port) on an event loop of its own, in a
background thread, once per run. `run` runs one step: it swaps in the step's batcher and recorders (the app reads
them through `_Current`, so the server is not restarted), runs `agent(client, row)` for every row concurrently on
that loop, each with its own `openai.AsyncOpenAI` (max_retries=0: a retried request would be recorded twice), each
cancelled once it has spent `timeout_s` seconds of its own (outside its chat completions: the time a completion waits
for the barrier and the engine is not counted, so one hung agent that holds the barrier up does not use up the
others' time), and leaves the batcher for every agent that finished, failed or was cancelled, so the
others never wait for it. It returns once no request is being answered and no engine call runs, so the trainer never
updates the weights under a generation.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hybridrl.openai_api.protocol import APIError
from hybridrl.rollout.agent.batcher import Batcher, EngineCall
from hybridrl.rollout.agent.proxy import AgentLimits, build_app
from hybridrl.rollout.agent.recorder import Recorder
from hybridrl.rollout.agent.rows import ERROR, OK, TIMEOUT, AgentOutcome, returned_reward
from hybridrl.user_code import failure

CANCEL_GRACE_S = 5.0  # how long a cancelled agent gets to unwind before the step goes on without it


@dataclass
class StepCounts:
    """What the proxy counted over one step (agent/* metrics)."""

    limit_hits: int = 0  # requests refused with a 400 for a turn or token limit
    malformed_tool_calls: int = 0
    segments_dropped: int = 0  # segments recorder.sample() leaves out (a template that rewrites history)
    generated_tokens_dropped: int = 0  # generated tokens of those segments
    retries: int = 0  # requests that repeated the previous one (recorded once)


class _Current:
    """The step's batcher, as the app sees it (the app is built once; each step has its own Batcher), and the time
    each agent's completions spent waiting (for the barrier and the engine), which its timeout does not count."""

    def __init__(self):
        self.batcher: Optional[Batcher] = None
        self.waited: list[float] = []  # per agent, seconds spent in finished completions
        self.since: dict[int, float] = {}  # agent -> when its completion in progress started waiting

    def reset(self, batcher: Batcher, k: int) -> None:
        self.batcher, self.waited, self.since = batcher, [0.0] * k, {}

    async def generate(self, agent: int, prompt: list[int], max_new_tokens: int):
        batcher, start = self.batcher, time.monotonic()
        self.since[agent] = start
        try:
            return await batcher.generate(agent, prompt, max_new_tokens)
        except asyncio.CancelledError:
            if agent in batcher.live:
                raise
            # the agent left (timed out) while this request waited: an error answer, not a traceback in the log
            raise APIError(409, f"agent {agent} left this rollout step (timed out)", None, "agent_left") from None
        finally:
            if batcher is self.batcher:
                self.waited[agent] += time.monotonic() - start
                self.since.pop(agent, None)

    def own_time(self, agent: int, start: float) -> float:
        """Seconds since `start` agent `agent` spent outside its completions (its own code and tools)."""
        now = time.monotonic()
        waiting = now - self.since[agent] if agent in self.since else 0.0
        return now - start - self.waited[agent] - waiting


class _Gate:
    """ASGI wrapper: serves /s{step}/agents/... of the current step only (a request a cancelled agent of an earlier
    step sent late is refused, never answered as the same index of this step), and counts the requests being
    answered (a step ends when none is)."""

    def __init__(self, app):
        self.app, self.active, self.prefix = app, 0, "/s0"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if not path.startswith(self.prefix + "/"):
            return await _refuse(send, f"{path}: not an agent of the current rollout step")
        self.active += 1
        try:
            rest = path[len(self.prefix):]
            await self.app(dict(scope, path=rest, raw_path=rest.encode()), receive, send)
        finally:
            self.active -= 1


async def _refuse(send, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": "not_found"}}).encode()
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class ProxyServer:
    """The loopback endpoint of a run's agents: /agents/{i}/v1 is agent i of the current step."""

    def __init__(self, tokenizer, limits: AgentLimits):
        self.tokenizer, self.limits = tokenizer, limits
        self.current, self.recorders = _Current(), []
        self.counts: dict[str, Any] = {"turns": [], "malformed_tool_calls": 0}
        self.limit_hits, self.steps = 0, 0
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.port: Optional[int] = None
        self._step = None  # the step `run` runs (a concurrent.futures.Future), for `cancel`

    def start(self, timeout_s: float = 60.0) -> None:
        import uvicorn  # the fastapi extra, needed only by agent rollouts

        app = build_app(self.tokenizer, self.current, self.recorders, self.limits, self.counts)
        answer = app.exception_handlers[APIError]

        async def counted(request, e: APIError):  # the proxy's own answer, with limit refusals counted
            self.limit_hits += int(e.code == "agent_limit")
            return await answer(request, e)

        app.add_exception_handler(APIError, counted)
        self.app = _Gate(app)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="off",
                                                    timeout_graceful_shutdown=2))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="hybridrl-agent-proxy", daemon=True)
        self.thread.start()
        self.serving = asyncio.run_coroutine_threadsafe(self.server.serve(), self.loop)
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if self.serving.done() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the agent proxy did not start on 127.0.0.1 within {timeout_s:.0f}s")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def url(self, agent: int) -> str:
        """Agent `agent`'s base_url in the current step."""
        return f"http://127.0.0.1:{self.port}{self.app.prefix}/agents/{agent}/v1"

    def run(self, agent: Callable, rows: list[dict], engine_call: EngineCall, timeout_s: float
            ) -> tuple[list[AgentOutcome], StepCounts]:
        """Run `agent` on every row (agent i gets rows[i] and /agents/i/v1); per agent how it ended."""
        step = self._step = asyncio.run_coroutine_threadsafe(self._run(agent, rows, engine_call, timeout_s),
                                                              self.loop)
        try:
            return step.result()
        except BaseException:  # Ctrl-C here, or a failure: the agents still running are cancelled, not left waiting
            step.cancel()
            raise

    def cancel(self) -> None:
        """Cancel the step `run` is running (from another thread: an asynchronous run's close); its `run` raises
        CancelledError once the agents have been cancelled."""
        step = self._step
        if step is not None:
            step.cancel()

    async def _run(self, agent: Callable, rows: list[dict], engine_call: EngineCall, timeout_s: float):
        k, self.steps = len(rows), self.steps + 1
        self.app.prefix = f"/s{self.steps}"
        batcher = Batcher(engine_call, k)
        self.current.reset(batcher, k)
        self.recorders[:] = [Recorder(self.tokenizer) for _ in range(k)]
        self.counts["turns"], self.counts["malformed_tool_calls"], self.limit_hits = [0] * k, 0, 0
        ended = await asyncio.gather(*[self._one(agent, i, rows[i], batcher, timeout_s) for i in range(k)])
        while self.app.active:  # every agent has left, so the requests still answered end at once
            await asyncio.sleep(0.005)
        outcomes = [self._outcome(i, *e) for i, e in enumerate(ended)]
        recs = self.recorders
        return outcomes, StepCounts(self.limit_hits, self.counts["malformed_tool_calls"],
                                    sum(r.segments_dropped for r in recs),
                                    sum(r.generated_tokens_dropped for r in recs), sum(r.retries for r in recs))

    @staticmethod
    def _agent_http():
        """Agent i's own HTTP client (one connection: its requests are sequential). An openai.AsyncOpenAI left to
        itself makes an httpx client whose TLS context reads the CA bundle, even for an http:// URL: 17 ms of CPU
        apiece, 37 % of a training process's samples in a step of 256 calculator agents (py-spy, this machine);
        without TLS it is 0.2 ms. One client shared by all agents is no better: httpcore's pool scans every
        connection for every request (17 % of the samples with 256 agents)."""
        import httpx

        return httpx.AsyncClient(timeout=httpx.Timeout(None), verify=False)  # the openai client sets each timeout

    async def _one(self, agent: Callable, i: int, row: dict, batcher: Batcher, timeout_s: float):
        """(status, returned value, error, seconds) of agent i; it has left the batcher when this returns."""
        import openai

        client = openai.AsyncOpenAI(base_url=self.url(i), api_key="hybridrl", max_retries=0,
                                    http_client=self._agent_http())
        start = time.monotonic()
        task = asyncio.ensure_future(agent(client, copy.deepcopy(row)))  # an agent may edit its row
        try:
            while not task.done():  # the timeout counts the agent's own time: not its completions' waits
                left = timeout_s - self.current.own_time(i, start)
                if left > 0:
                    await asyncio.wait({task}, timeout=left)
                    continue
                task.cancel()
                await asyncio.wait({task}, timeout=CANCEL_GRACE_S)  # one that ignores the cancel is left behind
                return TIMEOUT, None, f"timed out: {timeout_s:g}s of its own time", time.monotonic() - start
            if task.cancelled():  # it cancelled itself
                return ERROR, None, "CancelledError: the agent was cancelled", time.monotonic() - start
            if task.exception() is not None:
                return ERROR, None, failure(task.exception()), time.monotonic() - start
            return OK, task.result(), "", time.monotonic() - start
        finally:
            if not task.done():  # this step was cancelled (Ctrl-C): so is the agent
                task.cancel()
            batcher.leave(i)
            await client.close()  # and its http client

    def _outcome(self, i: int, status: str, value: Any, error: str, seconds: float) -> AgentOutcome:
        rec = self.recorders[i]
        out = AgentOutcome(status, rec.sample() if rec.segments else None, error=error,
                           turns=self.counts["turns"][i], duration_s=seconds)
        if status == OK:
            try:
                out.reward, out.fields = returned_reward(value)
            except ValueError as e:  # not a reward: the agent's error, handled as one
                out.status, out.error = ERROR, f"ValueError: {e}"
        return out

    def close(self) -> None:
        """Stop serving and end the loop's thread (idempotent)."""
        if self.loop is None:
            return
        self.server.should_exit = True
        try:
            self.serving.result(timeout=30)
        except Exception:  # noqa: BLE001  a server that failed to start has nothing left to stop
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()
        self.loop = None
