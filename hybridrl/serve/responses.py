"""OpenAI response bodies and server-sent-event chunks for /v1/completions ("completion") and
/v1/chat/completions ("chat"), built from a request's Deltas (serve/jobs.py) on openai_api/responses.py.

A chat turn that may hold tool calls (openai_api/tools.py) streams held back from the first `<tool_call>`
(or a text that may be its start) to the end of the turn (ToolStream), so a client never sees half a call
as text; the text before it streams as usual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

from hybridrl.openai_api.hermes import TOOL_CALL_START
from hybridrl.openai_api.logprobs import TokenLogprob, chat_logprobs, legacy_logprobs
from hybridrl.openai_api.protocol import APIError
from hybridrl.openai_api.responses import DONE, Meta, chunk, sse, usage
from hybridrl.openai_api.tools import ToolTurn, split_turn
from hybridrl.serve.jobs import Delta
from hybridrl.serve.metrics import Counters
from hybridrl.serve.service import Pending
from hybridrl.serve.text import partial_stop_len


@dataclass
class ServeMeta(Meta):
    """Meta plus what the server's choices are built with."""

    n: int = 1  # choices per prompt: choice i answers prompt i // n
    logprobs: bool = False  # choices carry their tokens' log-probs
    echo: Optional[list[str]] = None  # completions with echo: each prompt's text, put before its choices' text
    tools: bool = False  # chat: the model's turns are read for tool calls (openai_api/tools.py)
    counters: Optional[Counters] = None  # the server's, counting the tool calls returned and the malformed ones


@dataclass
class Answer:
    """One choice as its deltas arrive (non-streamed responses)."""

    text: str = ""
    finish_reason: Optional[str] = None
    tokens: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)

    def add(self, d: Delta) -> None:
        self.text += d.text
        self.finish_reason, self.tokens = d.finish_reason, d.completion_tokens
        self.logprobs += d.logprobs
        self.prompt_logprobs += d.prompt_logprobs or []


def count(meta: ServeMeta, turn: ToolTurn) -> None:
    if meta.counters is not None:
        meta.counters.add("tool_calls", len(turn.calls))
        meta.counters.add("malformed_tool_calls", turn.malformed)


def choice(meta: ServeMeta, index: int, a: Answer) -> dict:
    if meta.kind == "chat":
        message, reason = {"role": "assistant", "content": a.text}, a.finish_reason
        if meta.tools:
            turn = split_turn(a.text)
            count(meta, turn)
            message["content"] = turn.content
            if turn.calls:
                message["tool_calls"], reason = turn.calls, "tool_calls"
        return {"index": index, "message": message, "logprobs": chat_logprobs(a.logprobs) if meta.logprobs else None,
                "finish_reason": reason}
    prefix = meta.echo[index // meta.n] if meta.echo is not None else ""
    # echo: the prompt's tokens first, then the completion's, whose offsets start after the prompt's text
    lps = legacy_logprobs(a.prompt_logprobs) if meta.logprobs else None
    if lps is not None:
        tail = legacy_logprobs(a.logprobs, len(prefix))
        lps = {key: lps[key] + tail[key] for key in tail}
    return {"index": index, "text": prefix + a.text, "logprobs": lps, "finish_reason": a.finish_reason}


class ToolStream:
    """The streamed text of a turn that may hold calls: `feed` returns the text safe to send as content now,
    `finish` the turn's end (what is left as content, the calls)."""

    def __init__(self):
        self.text = ""  # the whole turn so far
        self.sent = 0  # characters of `text` sent as content

    def feed(self, piece: str) -> str:
        self.text += piece
        at = self.text.find(TOOL_CALL_START, self.sent)
        end = at if at >= 0 else len(self.text) - partial_stop_len(self.text, [TOOL_CALL_START])
        if not self.text[:end].strip():  # whitespace before a call is not content: wait for real text
            return ""
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def finish(self) -> ToolTurn:
        """The held-back rest of the turn: calls (and the text around them) or, if broken, text."""
        return split_turn(self.text[self.sent:])


async def collect(meta: ServeMeta, pending: Pending, prompt_tokens: int) -> dict:
    """The whole (non-streamed) response body."""
    answers = [Answer() for _ in pending.jobs]
    async for d in pending.events():
        answers[d.index].add(d)
    choices = [choice(meta, i, a) for i, a in enumerate(answers)]
    return {**meta.head(False), "choices": choices, "usage": usage(prompt_tokens, sum(a.tokens for a in answers))}


async def stream(meta: ServeMeta, pending: Pending, prompt_tokens: int, include_usage: bool) -> AsyncIterator[str]:
    """The response as server-sent events, ending in `data: [DONE]`. Chat choices open with the
    assistant role; a failure after the stream has started is sent as an error event."""
    tokens, offsets = [0] * len(pending.jobs), [0] * len(pending.jobs)
    held = [ToolStream() for _ in pending.jobs] if meta.tools else None
    try:
        if meta.kind == "chat":
            for i in range(len(pending.jobs)):
                yield sse(chunk(meta, i, {"role": "assistant", "content": ""}, None, include_usage))
        async for d in pending.events():
            tokens[d.index] = d.completion_tokens
            piece, reason = _piece(meta, d) if held is None else _tool_piece(meta, d, held[d.index])
            yield sse(chunk(meta, d.index, piece, reason, include_usage, _chunk_logprobs(meta, d, offsets[d.index])))
            offsets[d.index] += len(d.text)
        if include_usage:
            yield sse({**meta.head(True), "choices": [], "usage": usage(prompt_tokens, sum(tokens))})
        yield DONE
    except APIError as e:
        yield sse(e.body())
    finally:
        pending.cancel()  # a client that went away frees its rows at the next step


def _chunk_logprobs(meta: ServeMeta, d: Delta, offset: int) -> Optional[dict]:
    """The log-probs of a chunk's tokens (None when the request asked for none)."""
    if not meta.logprobs or not d.logprobs:  # the last chunk of a choice often has no new token
        return None
    return chat_logprobs(d.logprobs) if meta.kind == "chat" else legacy_logprobs(d.logprobs, offset)


def _piece(meta: ServeMeta, d: Delta) -> tuple[dict | str, Optional[str]]:
    """A chunk's delta (chat) or text (completions), and its finish_reason."""
    if meta.kind == "chat":
        return ({"content": d.text} if d.text else {}), d.finish_reason
    return d.text, d.finish_reason


def _tool_piece(meta: ServeMeta, d: Delta, held: ToolStream) -> tuple[dict, Optional[str]]:
    """A chat chunk's delta when the turn may hold calls: text outside them; on the last delta, the calls."""
    content, reason, delta = held.feed(d.text), d.finish_reason, {}
    if reason is not None:
        turn = held.finish()
        count(meta, turn)
        content += turn.content or ""
        if turn.calls:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(turn.calls)]
            reason = "tool_calls"
    return ({"content": content, **delta} if content else delta), reason
