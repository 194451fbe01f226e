"""The loopback OpenAI endpoint the agents talk to: POST /agents/{agent}/v1/chat/completions.

A thin app over the batcher and the recorders: the request is validated with serve/protocol.py's models (the same
400s as `hybridrl serve`), rendered by the chat template (with its tools), recorded (recorder.py), generated in the
barrier's next engine call (batcher.py), and answered with serve/tools.py's split of the turn into content and
tool_calls. A malformed call is returned as text with finish_reason "stop" and counted. Sampling is the run's
(rollout temperature, top-p): a request's own sampling fields are ignored so the recorded log-probs are the ones
training assumes. Not yet: streaming (the agent's client must not ask for stream=true).
"""

from __future__ import annotations

import time
import uuid
from typing import Optional

from fastapi import FastAPI, Request  # this module is imported only by agent rollouts (the fastapi extra)
from fastapi.responses import JSONResponse

from hybridrl.rollout.agent.batcher import Batcher
from hybridrl.rollout.agent.recorder import Recorder
from hybridrl.serve.protocol import APIError, ChatRequest, parse
from hybridrl.serve.tools import split_turn, template_messages


class AgentLimits:
    """Per agent: at most `max_turns` completions and `max_tokens` generated tokens in all."""

    def __init__(self, max_turns: int, max_tokens: int):
        self.max_turns, self.max_tokens = max_turns, max_tokens


def build_app(tokenizer, batcher: Batcher, recorders: list[Recorder], limits: AgentLimits, counts: dict):
    """The FastAPI app; `counts` gathers malformed_tool_calls and turns per agent (agent/* metrics)."""
    app = FastAPI()

    @app.exception_handler(APIError)
    async def _api_error(request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.get("/agents/{agent}/v1/models")
    async def models(agent: int):
        return {"object": "list", "data": [{"id": "policy", "object": "model", "owned_by": "hybridrl"}]}

    @app.post("/agents/{agent}/v1/chat/completions")
    async def chat(agent: int, request: Request):
        req = parse(ChatRequest, await request.json())
        if req.stream:
            raise APIError(400, "streaming is not supported by the agent proxy yet; send stream=false", "stream",
                           "unsupported_parameter")
        rec = _recorder(recorders, agent)
        turns, used = counts["turns"][agent], sum(sum(s.mask) for s in rec.segments)
        if turns >= limits.max_turns or used >= limits.max_tokens:
            raise APIError(400, f"agent {agent} reached its limit (rollout.agent.max_turns={limits.max_turns}, "
                                f"max_tokens={limits.max_tokens})", None, "agent_limit")
        tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
        messages = rec.raw_history(template_messages(req.messages))
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        room = limits.max_tokens - used
        wanted = req.max_completion_tokens or req.max_tokens or room
        ids, log_probs = await batcher.generate(agent, rec.prompt(text), min(wanted, room))
        counts["turns"][agent] += 1
        return _answer(tokenizer, rec, ids, log_probs, req.parses_tools, counts, len(rec.sample().context()))

    return app


def _recorder(recorders: list[Recorder], agent: int) -> Recorder:
    if not 0 <= agent < len(recorders):
        raise APIError(404, f"no agent {agent} in this rollout", None, "not_found")
    return recorders[agent]


def _answer(tokenizer, rec: Recorder, ids: list[int], log_probs: list[float], parses_tools: bool, counts: dict,
            prompt_len: int) -> dict:
    ended = bool(ids) and ids[-1] in _eos_ids(tokenizer)
    raw = tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
    turn = split_turn(raw) if parses_tools else None
    calls: Optional[list] = turn.calls if turn is not None and turn.calls else None
    if turn is not None and turn.malformed:
        counts["malformed_tool_calls"] += turn.malformed
    message = {"role": "assistant", "content": turn.content if calls else raw}
    if calls:
        message["tool_calls"] = calls
    rec.record(ids, log_probs, message, raw)
    finish = "tool_calls" if calls else ("stop" if ended else "length")
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": "policy", "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt_len - len(ids), "completion_tokens": len(ids),
                      "total_tokens": prompt_len}}


def _eos_ids(tokenizer) -> set[int]:
    eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, list) else {eos}
