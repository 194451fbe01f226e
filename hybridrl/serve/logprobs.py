"""Log-probs the server returns: computed from logits (engine side) and written as OpenAI writes them.

Which distribution: the model's own, log_softmax of the raw logits in fp32, before temperature,
top-k and top-p (OpenAI's and vLLM's default "raw" log-probs). A sampled token's log-prob thus
does not depend on the request's sampling settings, and a prompt's log-probs are exactly those an
`hf` evaluator (lm-evaluation-harness) computes from a plain forward.

Two shapes: chat's `logprobs.content` list ({token, logprob, bytes, top_logprobs}) and the legacy
completions object (tokens, token_logprobs, top_logprobs as dicts, text_offset). With `echo` the
prompt's tokens come first and the first of them has no log-prob (None), as OpenAI and vLLM write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

MAX_CHAT_TOP = 20  # OpenAI's bound on chat `top_logprobs`
MAX_LEGACY_TOP = 5  # OpenAI's bound on completions `logprobs`


@dataclass(frozen=True)
class RawLogprob:
    """One token's log-prob and its top alternatives, as token ids (engine side, no tokenizer)."""

    token: int
    logprob: Optional[float]  # None: the first prompt token (nothing precedes it)
    top: tuple[tuple[int, float], ...] = ()  # the k most likely tokens at that position, most likely first


@dataclass(frozen=True)
class TokenLogprob:
    """RawLogprob with its tokens spelled (the text of each token decoded alone, special tokens kept)."""

    token: str
    logprob: Optional[float]
    top: tuple[tuple[str, float], ...] = ()


def from_logits(logits: Tensor, tokens: Sequence[int], k: int) -> list[RawLogprob]:
    """Each row's token's log-prob and its top-k under log_softmax(logits) in fp32; logits [N, V], tokens [N]."""
    logp = torch.log_softmax(logits.float(), -1)  # [N, V]
    chosen = logp.gather(-1, torch.tensor(tokens, device=logp.device)[:, None])[:, 0].tolist()  # [N]
    top_lp, top_ids = logp.topk(k, -1) if k > 0 else (logp[:, :0], logp[:, :0].long())  # [N, k]
    return [RawLogprob(tok, lp, tuple(zip(ids, lps)))
            for tok, lp, ids, lps in zip(tokens, chosen, top_ids.tolist(), top_lp.tolist())]


@torch.no_grad()
def prompt_logprobs(module, ids: list[int], k: int) -> list[RawLogprob]:
    """The log-prob of every prompt token given the ones before it (one plain forward, no padding);
    the first token's is None. Logits [P, V] of one prompt at a time bound the memory to one prompt's."""
    device = next(module.parameters()).device
    logits = module(input_ids=torch.tensor([ids], device=device)).logits[0, :-1]  # [P - 1, V]: predicts ids[1:]
    return [RawLogprob(ids[0], None)] + from_logits(logits, ids[1:], k)


def spell(raw: Sequence[RawLogprob], decode: Callable[[list[int]], list[str]]) -> list[TokenLogprob]:
    """Token ids to their texts, in one decode call for the whole list."""
    ids = [r.token for r in raw] + [t for r in raw for t, _ in r.top]
    texts = iter(decode(ids))
    tokens = [next(texts) for _ in raw]
    return [TokenLogprob(tok, r.logprob, tuple((next(texts), lp) for _, lp in r.top)) for tok, r in zip(tokens, raw)]


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
