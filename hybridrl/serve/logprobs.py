"""Log-probs the server returns, computed from logits (engine side); openai_api/logprobs.py writes them as
OpenAI does.

Which distribution: the model's own, log_softmax of the raw logits in fp32, before temperature,
top-k and top-p (OpenAI's and vLLM's default "raw" log-probs). A sampled token's log-prob thus
does not depend on the request's sampling settings, and a prompt's log-probs are exactly those an
`hf` evaluator (lm-evaluation-harness) computes from a plain forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from hybridrl.openai_api.logprobs import TokenLogprob


@dataclass(frozen=True)
class RawLogprob:
    """One token's log-prob and its top alternatives, as token ids (engine side, no tokenizer)."""

    token: int
    logprob: Optional[float]  # None: the first prompt token (nothing precedes it)
    top: tuple[tuple[int, float], ...] = ()  # the k most likely tokens at that position, most likely first


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
