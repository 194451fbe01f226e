"""The loopback OpenAI endpoint the agents talk to: POST /agents/{agent}/v1/chat/completions.

A thin app over the batcher and the recorders: the request is validated with openai_api/protocol.py's models (the same
400s as `hybridrl serve`), rendered by the chat template (with its tools), recorded (recorder.py), generated in the
barrier's next engine call (batcher.py), and answered with openai_api/tools.py's split of the turn into content and
tool_calls. A malformed call is returned as text with finish_reason "stop" and counted. Sampling is the run's
(rollout temperature, top-p): a request's own sampling fields are ignored so the recorded log-probs are the ones
training assumes. With stream=true the same turn is generated and recorded, then sent as serve's chunks: the
assistant role, the content and any tool_calls with the finish_reason, the usage if asked, `[DONE]` (the engine
generates a batch at once, so a turn arrives in one piece). OpenAI fields that change nothing here (store, metadata,
service_tier, ...) are accepted and ignored, as an OpenAI-compatible server does.
"""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI, Request  # this module is imported only by agent rollouts (the fastapi extra)
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import StrictBool

from hybridrl.openai_api.protocol import APIError, ChatRequest, parse
from hybridrl.openai_api.responses import DONE, Meta, chunk, sse, usage
from hybridrl.openai_api.tools import split_turn, template_messages
from hybridrl.rollout.agent.batcher import Batcher
from hybridrl.rollout.agent.recorder import Recorder


class AgentChatRequest(ChatRequest):
    """serve's chat request plus the OpenAI fields agent frameworks send that change nothing in a rollout (the
    OpenAI Agents SDK sends `store` and `metadata`); everything else stays refused as `hybridrl serve` refuses it."""

    store: Optional[StrictBool] = None  # OpenAI keeps the completion for its dashboard; nothing is kept here
    metadata: Optional[dict[str, str]] = None  # tags for that stored completion
    service_tier: Optional[str] = None  # OpenAI's latency tier; one engine here


class AgentLimits:
    """Per agent: at most `max_turns` completions and `max_tokens` generated tokens in all."""

    def __init__(self, max_turns: int, max_tokens: int):
        self.max_turns, self.max_tokens = max_turns, max_tokens


def build_app(tokenizer, batcher: Batcher, recorders: list[Recorder], limits: AgentLimits, counts: dict):
    """The FastAPI app; `counts` gathers malformed_tool_calls and turns per agent (agent/* metrics)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)  # only the routes below, nothing else to reach

    @app.exception_handler(APIError)
    async def _api_error(request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.get("/agents/{agent}/v1/models")
    async def models(agent: int):
        return {"object": "list", "data": [{"id": "policy", "object": "model", "owned_by": "hybridrl"}]}

    @app.post("/agents/{agent}/v1/chat/completions")
    async def chat(agent: int, request: Request):
        req = parse(AgentChatRequest, await request.json())
        _refuse_unsupported(req)
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
        message, finish = _answer(tokenizer, rec, ids, log_probs, req.parses_tools, counts)
        n_prompt = len(rec.sample().context()) - len(ids)
        if req.stream:
            include = req.stream_options is not None and req.stream_options.include_usage
            return StreamingResponse(_chunks(message, finish, usage(n_prompt, len(ids)), include),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return {**Meta("chat", "policy").head(False), "usage": usage(n_prompt, len(ids)),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]}

    return app


# (field, set to a value the proxy would silently not honour, the fix): refused as serve refuses what it lacks
def _unsupported(req: AgentChatRequest) -> list[tuple[str, bool, str]]:
    return [("n", (req.n or 1) != 1, "send one request per completion (each is one turn of this agent)"),
            ("stop", bool(req.stop), "stop at the model's end of turn, or cut the text in the agent"),
            ("logprobs", bool(req.logprobs), "the proxy records the log-probs for training itself")]


def _refuse_unsupported(req: AgentChatRequest) -> None:
    for name, used, fix in _unsupported(req):
        if used:
            raise APIError(400, f"'{name}' is not supported by the agent proxy: {fix}", name, "unsupported_parameter")


def _recorder(recorders: list[Recorder], agent: int) -> Recorder:
    if not 0 <= agent < len(recorders):
        raise APIError(404, f"no agent {agent} in this rollout", None, "not_found")
    return recorders[agent]


def _answer(tokenizer, rec: Recorder, ids: list[int], log_probs: list[float], parses_tools: bool,
            counts: dict) -> tuple[dict, str]:
    """The turn as an OpenAI message and its finish_reason, recorded."""
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
    return message, "tool_calls" if calls else ("stop" if ended else "length")


async def _chunks(message: dict, finish: str, used: dict, include_usage: bool):
    """A recorded turn as serve's server-sent events (openai_api/responses.py): the role, then the content and the
    tool_calls (each with its index) with the finish_reason, the usage if asked, [DONE]."""
    meta = Meta("chat", "policy")
    yield sse(chunk(meta, 0, {"role": "assistant", "content": ""}, None, include_usage))
    delta = {"content": message["content"]} if message["content"] else {}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
    yield sse(chunk(meta, 0, delta, finish, include_usage))
    if include_usage:
        yield sse({**meta.head(True), "choices": [], "usage": used})
    yield DONE


def _eos_ids(tokenizer) -> set[int]:
    eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, list) else {eos}
