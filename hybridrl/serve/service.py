"""The generation service: the tokenizer, the worker thread that owns the backend, and per-request queues.

The HTTP handlers run on the event loop and never wait on the model: `submit` turns a plan into
jobs (serve/jobs.py) and puts them in the inbox; the worker thread generates them and each job
delivers its text to the request's asyncio.Queue through `loop.call_soon_threadsafe`; the
handler awaits that queue (`Pending.events`).
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import AsyncIterator

from hybridrl.openai_api.protocol import APIError
from hybridrl.serve.backend import Backend
from hybridrl.serve.jobs import Delta, Event, Failure, Inbox, Job, choice_keys, to_int64
from hybridrl.serve.metrics import Counters
from hybridrl.serve.requests import Plan
from hybridrl.serve.text import TextStream


def internal_error() -> APIError:
    """The answer to a failure on our side: a generic message (the traceback goes to the log only)."""
    return APIError(500, "The server had an error while processing your request.", type="internal_server_error",
                     code="internal_error")


class Pending:
    """The asyncio side of one request: its jobs and the queue their events arrive on."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.jobs: list[Job] = []

    def deliver(self, event: Event) -> None:
        """Called from the worker thread."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is shutting down and nobody listens
            pass

    async def events(self) -> AsyncIterator[Delta]:
        """Every Delta until all choices have finished; a backend failure raises a 500 APIError."""
        left = len(self.jobs)
        while left:
            event = await self.queue.get()
            if isinstance(event, Failure):
                raise internal_error()
            yield event
            left -= event.finish_reason is not None

    def cancel(self) -> None:
        """The client is gone (or the response is complete): unfinished jobs stop at the next step."""
        for job in self.jobs:
            job.cancelled = True


class GenerationService:
    def __init__(self, backend: Backend, tokenizer, eos_token_ids: list[int], seed: int = 0):
        self.backend, self.tokenizer = backend, tokenizer
        self.eos = frozenset(eos_token_ids)
        self.rng = random.Random(seed)  # seeds of requests that bring none: a fixed sequence per server seed
        self.counters = Counters()
        # One fast tokenizer is shared by the handlers' thread pool (encode) and the worker (decode); the Rust
        # side refuses concurrent mutable use ("Already borrowed"), so calls take turns.
        self._tok_lock = threading.Lock()
        self.inbox = Inbox()
        self.worker = threading.Thread(target=backend.serve, args=(self.inbox,), name="hybridrl-serve-worker",
                                       daemon=True)
        self.worker.start()

    @property
    def alive(self) -> bool:
        return self.worker.is_alive()

    def encode_text(self, text: str) -> list[int]:
        with self._tok_lock:
            return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def encode_prompt(self, prompt: str | list[int], param: str) -> list[int]:
        """A completions prompt as token ids: a string is tokenized, token ids are taken as they are (an
        evaluator that tokenized it itself counts on exactly these ids) once each is known to the tokenizer."""
        if isinstance(prompt, str):
            return self.encode_text(prompt)
        vocab = len(self.tokenizer)
        bad = next((t for t in prompt if t >= vocab), None)
        if bad is not None:
            raise APIError(400, f"Invalid value for '{param}': token id {bad} is not in this model's vocabulary "
                                f"(0 to {vocab - 1})", param, "invalid_value")
        return list(prompt)

    def spell(self, ids: list[int]) -> list[str]:
        """Each token's own text (special tokens kept): the `token` of a log-prob entry."""
        with self._tok_lock:
            return self.tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False)

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The chat template with the assistant's generation prompt, then tokens (as the trainer's data); tools go
        to the template, which must render them (else the model would never see them: a 400)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if tools and not (isinstance(template, str) and "tools" in template):
            raise APIError(400, "This model's chat template does not render tools, so the model would never see "
                                "them; serve a model whose template supports tools, or send no 'tools'", "tools",
                           "unsupported_parameter")
        try:
            with self._tok_lock:
                text = self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                                          tokenize=False)
        except Exception as e:  # jinja's TemplateError and friends: the template refused these messages
            raise APIError(400, f"The chat template cannot render these messages: {e}", "messages",
                           "invalid_value") from None
        with self._tok_lock:
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        with self._tok_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def submit(self, plan: Plan) -> Pending:
        """Queue n jobs per prompt (choice index prompt * n + j); call on the event loop."""
        if not self.alive:  # nothing would ever answer: fail now rather than hang
            raise APIError(503, "The generation worker has stopped; see the server log and restart it",
                           type="internal_server_error", code="worker_stopped")
        pending = Pending(asyncio.get_running_loop())
        count = len(plan.prompts) * plan.n
        seed = self.rng.getrandbits(64) if plan.seed is None else plan.seed
        keys = choice_keys(to_int64(seed), count)
        for i in range(count):
            pending.jobs.append(Job(i, plan.prompts[i // plan.n], plan.sampling, plan.max_tokens, keys[i],
                                    TextStream(self.decode, plan.stops), self.eos, pending.deliver, plan.logprobs,
                                    plan.prompt_logprobs, self.spell, eos_logprob=plan.eos_logprob))
        self.inbox.put(pending.jobs)
        return pending

    def close(self) -> None:
        self.inbox.close()
        self.worker.join(timeout=30)
        self.backend.close()
