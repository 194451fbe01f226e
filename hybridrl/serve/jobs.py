"""What the HTTP side hands the generation worker: one Job per response (choice), and the queue between.

A request with n choices (and, for completions, several prompts) becomes one Job per response.
The worker thread owns the jobs while they run: a backend calls `job.push(tokens)` as tokens are
generated, and the job detokenizes them (serve/text.py), decides whether it is over (EOS, stop
string, max_tokens) and delivers the new text to its request's asyncio queue with
`loop.call_soon_threadsafe`, so the event loop never waits on the model.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from hybridrl.openai_api.logprobs import TokenLogprob
from hybridrl.rollout.keyed import splitmix64
from hybridrl.serve.logprobs import RawLogprob, spell
from hybridrl.serve.text import TextStream

log = logging.getLogger("hybridrl.serve")


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn; jobs with equal Sampling can share a batch (max_tokens and stop may differ)."""

    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def group(self) -> "Sampling":
        """The batching key: greedy decoding ignores top_p/top_k."""
        return Sampling(0.0) if self.greedy else self


@dataclass
class Delta:
    """New text of choice `index`; `finish_reason` ("stop" | "length") on its last delta."""

    index: int
    text: str
    finish_reason: Optional[str]
    completion_tokens: int  # tokens generated so far for this choice (EOS included)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of the new tokens (EOS: with Job.eos_logprob)
    prompt_logprobs: Optional[list[TokenLogprob]] = None  # echo: the prompt's, on the choice's first delta


@dataclass
class Failure:
    """The backend failed on this job; the request ends with a 500 (the traceback stays in the log)."""

    index: int


Event = Delta | Failure
_ids = itertools.count()


@dataclass(eq=False)
class Job:
    """One response to generate."""

    index: int  # choice index within its request
    prompt_ids: list[int]
    sampling: Sampling
    max_tokens: int
    key: int  # int64 randomness key (choice_keys); same key, prompt and sampling -> same tokens
    text: TextStream
    eos: frozenset[int]
    deliver: Callable[[Event], None]  # thread-safe: puts the event on the request's queue
    logprobs: Optional[int] = None  # top-k of each generated token's log-probs to return; None: no log-probs
    prompt_logprobs: Optional[int] = None  # echo with logprobs: top-k of the prompt tokens' log-probs; None: none
    spell: Optional[Callable[[list[int]], list[str]]] = None  # token ids -> their texts (needed with log-probs)
    eos_logprob: bool = False  # with log-probs, a generated EOS gets its entry too (completions)
    id: str = field(default_factory=lambda: f"job-{next(_ids)}")
    tokens: list[int] = field(default_factory=list)  # generated ids, EOS included
    finish_reason: Optional[str] = None
    cancelled: bool = False  # set by the HTTP side when the client went away
    _pending: list[RawLogprob] = field(default_factory=list, init=False)  # log-probs not delivered yet
    _prompt: Optional[list[RawLogprob]] = field(default=None, init=False)  # delivered with the first delta
    _sent_first: bool = field(default=False, init=False)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.cancelled

    def set_prompt_logprobs(self, raw: list[RawLogprob]) -> None:
        """The backend scored the prompt (before the first token); sent with the first delta."""
        self._prompt = raw

    def push(self, new: Sequence[int], logprobs: Optional[Sequence[RawLogprob]] = None) -> bool:
        """Take newly generated tokens (one per step; vLLM may hand several) and, when the job asked for them,
        their log-probs; deliver their text; True once the job is over. Tokens after the end are ignored (and a
        finished job delivers nothing more)."""
        if self.finish_reason is not None:
            return True
        piece = ""
        for i, tok in enumerate(new):
            if self.finish_reason is not None:
                break
            self.tokens.append(tok)
            if tok in self.eos:
                self.finish_reason = "stop"
                if logprobs is not None and self.eos_logprob:
                    self._pending.append(logprobs[i])
            else:
                if logprobs is not None:
                    self._pending.append(logprobs[i])
                piece += self.text.push([tok])
                if self.text.stopped:
                    self.finish_reason = "stop"
                elif len(self.tokens) >= self.max_tokens:
                    self.finish_reason = "length"
        if self.finish_reason is not None:
            piece += self.text.finish()
        if piece or self.finish_reason is not None:
            self._send(piece)
        return self.done

    def end(self, reason: str) -> None:
        """The backend ended the job without a deciding token (e.g. vLLM's context limit, or max_tokens 0)."""
        if self.finish_reason is None:
            self.finish_reason = reason
            self._send(self.text.finish())

    def _send(self, piece: str) -> None:
        """Deliver the new text with the log-probs gathered since the last delta (a token whose text is held
        back, e.g. a possible stop string, gets its log-prob sent with the text that follows)."""
        lps = spell(self._pending, self.spell) if self._pending else []
        prompt = spell(self._prompt, self.spell) if self._prompt is not None and not self._sent_first else None
        self._pending, self._sent_first = [], True
        self.deliver(Delta(self.index, piece, self.finish_reason, len(self.tokens), lps, prompt))

    def fail(self) -> None:
        if self.finish_reason is None:
            self.finish_reason = "error"
            self.deliver(Failure(self.index))


def choice_keys(seed: int, count: int) -> list[int]:
    """int64 keys of a request's `count` responses from its 64-bit seed (SplitMix64, rollout/keyed.py):
    response i's draws depend only on (seed, i), never on the batch it lands in."""
    base = splitmix64(torch.tensor([seed], dtype=torch.int64))
    return splitmix64(base ^ torch.arange(count, dtype=torch.int64)).tolist()


def to_int64(seed: int) -> int:
    """Any Python int as an int64 (two's complement of its low 64 bits)."""
    seed &= (1 << 64) - 1
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def run_guarded(jobs: Sequence[Job], fn: Callable[[], None]) -> None:
    """fn(); on an exception, log the traceback and end every unfinished job with a Failure."""
    try:
        fn()
    except Exception:
        log.exception("generation failed for %d job(s)", len(jobs))
        for job in jobs:
            job.fail()


class Inbox:
    """FIFO of jobs waiting for the worker; `take` blocks until there are some or the inbox closes."""

    def __init__(self):
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def put(self, jobs: Sequence[Job]) -> None:
        with self._cond:
            self._jobs.extend(jobs)
            self._cond.notify()

    def __len__(self) -> int:
        """Jobs waiting (cancelled ones included until the next take drops them)."""
        with self._cond:
            return len(self._jobs)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def take(self, select: Callable[[list[Job]], list[Job]], block: bool = True) -> list[Job] | None:
        """select(queued jobs, oldest first) picks the jobs to run now; the others stay queued in order.
        Cancelled jobs are dropped. None once the inbox is closed."""
        with self._cond:
            while block and not self.closed and not any(not j.cancelled for j in self._jobs):
                self._cond.wait()
            if self.closed:
                return None
            queued = [j for j in self._jobs if not j.cancelled]
            chosen = select(queued) if queued else []
            taken = {id(j) for j in chosen}
            self._jobs = deque(j for j in queued if id(j) not in taken)
            return chosen
