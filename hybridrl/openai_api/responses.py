"""What every OpenAI response body and server-sent-event chunk of /v1/completions ("completion") and
/v1/chat/completions ("chat") shares: the id/object/created/model head, a streamed choice's chunk, the
usage, the event framing and the closing `[DONE]`. serve/responses.py builds whole answers on these; the
agent proxy (rollout/agent/proxy.py) sends its recorded turns with them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

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


def chunk(meta: Meta, index: int, delta: dict | str, finish_reason: Optional[str], with_usage: bool,
          logprobs: Optional[dict] = None) -> dict:
    """A streamed piece of choice `index`: chat carries a `delta` dict, completion its `text`."""
    part = {"delta": delta} if meta.kind == "chat" else {"text": delta}
    body = {**meta.head(True), "choices": [{"index": index, **part, "logprobs": logprobs,
                                            "finish_reason": finish_reason}]}
    return {**body, "usage": None} if with_usage else body
