"""Tool calls in the Hermes format (NousResearch Hermes-2-Pro; Qwen2.5's chat template):

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "123*456"}}
    </tool_call>

Only complete `<tool_call> ... </tool_call>` blocks are calls; a turn without one is the model's
answer. A block whose JSON is broken, or that lacks a name or an arguments object, is a
malformed call: the model reads an error message explaining the format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Optional

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_START) + r"(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL)
FORMAT_HINT = 'write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>'


@dataclass(frozen=True)
class ParsedCall:
    name: Optional[str]  # the function name; None when malformed
    arguments: Optional[dict]  # the JSON arguments object; None when malformed
    error: Optional[str] = None  # why the block is malformed (shown to the model)


def _parse_block(body: str) -> ParsedCall:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ParsedCall(None, None, f"the tool call is not valid JSON ({e.msg} at char {e.pos}); {FORMAT_HINT}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParsedCall(None, None, f'the tool call has no "name" string; {FORMAT_HINT}')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models send the arguments object as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    if not isinstance(args, dict):
        return ParsedCall(obj["name"], None, f'"arguments" must be a JSON object; {FORMAT_HINT}')
    return ParsedCall(obj["name"], args)


def parse_tool_calls(text: str) -> list[ParsedCall]:
    """Every complete tool-call block in one model turn, in order (empty: the turn is an answer)."""
    return [_parse_block(m.group(1).strip()) for m in _BLOCK.finditer(text)]


def end_of_first_call(pieces: list[str]) -> Optional[int]:
    """The number of tokens up to and including the first `</tool_call>`, or None if there is none.

    pieces: each generated token's text (decoded alone). Matching on text rather than on token
    ids works whether the tokenizer has `</tool_call>` as one special token (Qwen2.5) or spells
    it with several tokens (the bundled tiny model)."""
    text, ends = "", []
    for piece in pieces:
        text += piece
        ends.append(len(text))
    at = text.find(TOOL_CALL_END)
    if at < 0 or TOOL_CALL_START not in text[:at]:
        return None
    stop = at + len(TOOL_CALL_END)
    return next(i + 1 for i, end in enumerate(ends) if end >= stop)
