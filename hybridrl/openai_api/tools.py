"""Tool calls on /v1/chat/completions: the request's history rendered for the chat template, and the
model's turn split into text and OpenAI `tool_calls` (`hybridrl serve` and the agent proxy alike).

The model writes calls in the Hermes format the rollout's tools read (openai_api/hermes.py):
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. A turn whose blocks all parse becomes
`message.tool_calls` (arguments as a JSON string, as OpenAI sends them) with finish_reason
"tool_calls"; the text outside the blocks, if any, stays `content`. A turn with a broken block (bad
JSON, no name, arguments not an object, or a `<tool_call>` never closed) is returned as text, as an
OpenAI model's plain answer would be, and counted (the server's /metrics, the proxy's agent metrics).

Streaming such a turn is the server's (ToolStream in serve/responses.py).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Optional

from hybridrl.openai_api.hermes import TOOL_CALL_END, TOOL_CALL_START, parse_tool_calls
from hybridrl.openai_api.protocol import APIError, Message

_BLOCK = re.compile(re.escape(TOOL_CALL_START) + r".*?" + re.escape(TOOL_CALL_END), re.DOTALL)


@dataclass(frozen=True)
class ToolTurn:
    """A model turn as OpenAI returns it."""

    content: Optional[str]  # None: the turn was only calls (or whitespace around them)
    calls: list[dict] = field(default_factory=list)  # OpenAI tool_calls: [{id, type, function: {name, arguments}}]
    malformed: int = 0  # broken call blocks in a turn returned as text


def split_turn(text: str) -> ToolTurn:
    """The turn's calls and the rest of its text; a turn with any broken block is all text."""
    parsed = parse_tool_calls(text)
    rest = _BLOCK.sub("", text)
    broken = sum(p.error is not None for p in parsed) + (TOOL_CALL_START in rest)  # + an unclosed block
    if not parsed or broken:
        return ToolTurn(text, [], broken)
    calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
              "function": {"name": p.name, "arguments": json.dumps(p.arguments, ensure_ascii=False)}} for p in parsed]
    return ToolTurn(rest if rest.strip() else None, calls)


def template_messages(messages: list[Message]) -> list[dict]:
    """The request's messages as the chat template reads them: an assistant's tool_calls with their arguments
    as objects (templates write them with `tojson`; OpenAI clients send JSON strings), a tool result with the
    id of its call."""
    out = []
    for i, m in enumerate(messages):
        msg: dict = {"role": m.role, "content": m.content if m.content is not None else ""}
        if m.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments,
                                                                                               i, j)}}
                                 for j, c in enumerate(m.tool_calls)]
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        if m.role == "tool" and m.name is not None:
            msg["name"] = m.name
        out.append(msg)
    return out


def _arguments(text: str, i: int, j: int) -> dict:
    param = f"messages[{i}].tool_calls[{j}].function.arguments"
    try:
        args = json.loads(text)
    except json.JSONDecodeError as e:
        raise APIError(400, f"Invalid value for '{param}': not JSON ({e.msg}); send the call's arguments as a "
                            "JSON object string", param, "invalid_value") from None
    if not isinstance(args, dict):
        raise APIError(400, f"Invalid value for '{param}': a JSON object string is expected", param, "invalid_value")
    return args
