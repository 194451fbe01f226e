"""Log-probs written as OpenAI writes them, from tokens already spelled (serve/logprobs.py computes them).

Two shapes: chat's `logprobs.content` list ({token, logprob, bytes, top_logprobs}) and the legacy
completions object (tokens, token_logprobs, top_logprobs as dicts, text_offset). With `echo` the
prompt's tokens come first and the first of them has no log-prob (None), as OpenAI and vLLM write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

MAX_CHAT_TOP = 20  # OpenAI's bound on chat `top_logprobs`
MAX_LEGACY_TOP = 5  # OpenAI's bound on completions `logprobs`


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-prob and its top alternatives, spelled (the text of each token decoded alone, special
    tokens kept)."""

    token: str
    logprob: Optional[float]  # None: the first prompt token (nothing precedes it)
    top: tuple[tuple[str, float], ...] = ()  # the k most likely tokens at that position, most likely first


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict:
    """choices[i].logprobs of a chat response (or of one chunk): {"content": [...]}."""
    return {"content": [{**_entry(e.token, e.logprob), "top_logprobs": [_entry(t, lp) for t, lp in e.top]}
                        for e in entries]}


def legacy_logprobs(entries: Sequence[TokenLogprob], offset: int = 0) -> dict:
    """choices[i].logprobs of a completions response (or chunk); `offset`: where the first token's text
    starts in the choice's text. top_logprobs holds the top k and the token itself (vLLM's legacy shape);
    a position without a log-prob (the first prompt token) has None for both."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    # the token first, so that a top-k token spelled the same keeps its own (higher or equal) log-prob
    tops = [None if e.logprob is None else {e.token: e.logprob, **dict(e.top)} for e in entries]
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": tops, "text_offset": offsets}
