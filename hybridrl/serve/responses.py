"""OpenAI response bodies and server-sent-event chunks for /v1/completions ("completion") and
/v1/chat/completions ("chat"), built from a request's Deltas (serve/jobs.py)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

from hybridrl.serve.jobs import Delta
from hybridrl.serve.protocol import APIError
from hybridrl.serve.service import Pending

OBJECTS = {"completion": ("text_completion", "text_completion"), "chat": ("chat.completion", "chat.completion.chunk")}
ID_PREFIX = {"completion": "cmpl", "chat": "chatcmpl"}
DONE = "data: [DONE]\n\n"


@dataclass
class Meta:
    """The fields every body and chunk of one response repeats."""

    kind: str  # "completion" | "chat"
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self):
        self.id = self.id or f"{ID_PREFIX[self.kind]}-{uuid.uuid4().hex}"

    def head(self, streaming: bool) -> dict:
        return {"id": self.id, "object": OBJECTS[self.kind][streaming], "created": self.created, "model": self.model}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def sse(obj: dict) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def choice(meta: Meta, index: int, text: str, finish_reason: Optional[str]) -> dict:
    if meta.kind == "chat":
        return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": None,
                "finish_reason": finish_reason}
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}


def chunk(meta: Meta, index: int, delta: dict | str, finish_reason: Optional[str], with_usage: bool) -> dict:
    """A streamed piece of choice `index`: chat carries a `delta` dict, completion its `text`."""
    part = {"delta": delta} if meta.kind == "chat" else {"text": delta}
    body = {**meta.head(True), "choices": [{"index": index, **part, "logprobs": None, "finish_reason": finish_reason}]}
    return {**body, "usage": None} if with_usage else body


async def collect(meta: Meta, pending: Pending, prompt_tokens: int) -> dict:
    """The whole (non-streamed) response body."""
    count = len(pending.jobs)
    texts, reasons, tokens = [""] * count, [None] * count, [0] * count
    async for d in pending.events():
        texts[d.index] += d.text
        reasons[d.index], tokens[d.index] = d.finish_reason, d.completion_tokens
    choices = [choice(meta, i, texts[i], reasons[i]) for i in range(count)]
    return {**meta.head(False), "choices": choices, "usage": usage(prompt_tokens, sum(tokens))}


async def stream(meta: Meta, pending: Pending, prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
    """The response as server-sent events, ending in `data: [DONE]`. Chat choices open with the
    assistant role; a failure after the stream has started is sent as an error event."""
    tokens = [0] * len(pending.jobs)
    try:
        if meta.kind == "chat":
            for i in range(len(pending.jobs)):
                yield sse(chunk(meta, i, {"role": "assistant", "content": ""}, None, include_usage))
        async for d in pending.events():
            tokens[d.index] = d.completion_tokens
            yield sse(chunk(meta, d.index, _piece(meta, d), d.finish_reason, include_usage))
        if include_usage:
            yield sse({**meta.head(True), "choices": [], "usage": usage(prompt_tokens, sum(tokens))})
        yield DONE
    except APIError as e:
        yield sse(e.body())
    finally:
        pending.cancel()  # a client that went away frees its rows at the next step


def _piece(meta: Meta, d: Delta) -> dict | str:
    if meta.kind == "chat":
        return {"content": d.text} if d.text else {}
    return d.text
