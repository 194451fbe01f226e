"""HuggingFace backend: the model in this process, generating dynamic batches of compatible jobs.

The worker takes the oldest queued job and every other queued job that can share its batch (same
sampling settings, up to --max-num-seqs rows, longest prompt + largest max_tokens within the
context), and generates them together with the rollout engine's sampling loop (rollout/hf.py).
Its per-step callback hands each row's token to its job, which streams the text out and tells
the loop to end the row (stop string, the job's own max_tokens, a client that went away); the
batch ends when every row has. Jobs arriving meanwhile wait for the next batch.

Each row samples with its job's key (rollout/keyed.py), so a response is the same alone or in
any batch (up to float near-ties of ~1e-7 in the probabilities).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl.batch import left_pad
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.serve.backend import Backend
from hybridrl.serve.jobs import Inbox, Job, run_guarded
from hybridrl.serve.logprobs import RawLogprob, from_logits, prompt_logprobs


def select_batch(queued: list[Job], limit: int, max_model_len: int) -> list[Job]:
    """The oldest job plus the later ones that may join it, oldest first: same sampling group, at most
    `limit` rows, and longest prompt + largest max_tokens <= max_model_len (every row's KV cache and
    positions are sized for that; each job alone fits, the request validation saw to it)."""
    group = queued[0].sampling.group()
    batch: list[Job] = []
    longest_prompt = most_tokens = 0
    for job in queued:
        if len(batch) == limit:
            break
        p, t = max(longest_prompt, len(job.prompt_ids)), max(most_tokens, job.max_tokens)
        if job.sampling.group() != group or (batch and p + t > max_model_len):
            continue
        batch.append(job)
        longest_prompt, most_tokens = p, t
    return batch


class HFBackend(Backend):
    name = "hf"

    def __init__(self, module, eos_token_ids: list[int], pad_token_id: int, max_num_seqs: int, max_model_len: int):
        self.engine = HFRolloutEngine(module.eval(), eos_token_ids, pad_token_id, max_num_seqs=max_num_seqs)
        self.pad_token_id, self.max_num_seqs, self.max_model_len = pad_token_id, max_num_seqs, max_model_len
        self.device = next(module.parameters()).device

    def serve(self, inbox: Inbox) -> None:
        select = lambda queued: select_batch(queued, self.max_num_seqs, self.max_model_len)  # noqa: E731
        while (batch := inbox.take(select)) is not None:
            run_guarded(batch, lambda: self.generate(batch))

    def generate(self, jobs: list[Job]) -> None:
        """One batch of jobs that share their sampling settings, streamed token by token. Echoed prompts are
        scored first (a plain forward each); a job of max_tokens 0 (echo) ends there."""
        for job in jobs:
            if job.prompt_logprobs is not None:
                job.set_prompt_logprobs(prompt_logprobs(self.engine.module, job.prompt_ids, job.prompt_logprobs))
            if job.max_tokens == 0:
                job.end("length")
        jobs = [job for job in jobs if not job.done]
        if jobs:
            self._sample(jobs)

    def _sample(self, jobs: list[Job]) -> None:
        s = jobs[0].sampling
        params = SamplingParams(max_new_tokens=max(j.max_tokens for j in jobs), temperature=s.temperature or 1.0,
                                top_p=s.top_p, top_k=s.top_k, do_sample=not s.greedy)
        ids, mask = left_pad([j.prompt_ids for j in jobs], self.pad_token_id, self.device)
        keys = torch.tensor([j.key for j in jobs], dtype=torch.int64)

        top = max((j.logprobs for j in jobs if j.logprobs is not None), default=None)  # None: nobody wants them

        def on_step(start: int, t: int, tokens: Tensor, live: Tensor, logits: Tensor) -> Tensor:
            rows = jobs[start:start + len(tokens)]
            raw = None if top is None else from_logits(logits, tokens.tolist(), top)  # the step's own logits
            return torch.tensor([not alive or job.done or job.push([tok], _own(raw, i, job))
                                 for i, (job, tok, alive) in enumerate(zip(rows, tokens.tolist(), live.tolist()))])

        self.engine.generate_keyed(ids, mask, params, keys, on_step)
        for job in jobs:  # every job ends in on_step; this only guards against a silent hang
            if not job.done:
                job.end("length")


def _own(raw: list[RawLogprob] | None, row: int, job: Job) -> list[RawLogprob] | None:
    """Row `row`'s log-prob cut to its job's top-k (the batch computed the largest k asked), or None."""
    if raw is None or job.logprobs is None:
        return None
    r = raw[row]
    return [RawLogprob(r.token, r.logprob, r.top[:job.logprobs])]
