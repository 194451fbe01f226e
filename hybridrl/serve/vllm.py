"""vLLM backend: vLLM's engine with its own continuous batching, stepped by the worker thread.

Each job becomes one vLLM request (token ids in, `detokenize=False`: the job detokenizes and
applies stop strings itself, as with `hf`, so both backends return text the same way). The worker
adds newly queued jobs between engine steps, pushes each step's new tokens to their jobs (a
RequestOutput carries the cumulative token ids of its request) and aborts the requests whose job
ended first (stop string, client gone). Requests are seeded from their job's key, so a seeded
request is reproducible, though vLLM draws different tokens than `hf` does for the same seed.
Log-probs are vLLM's "raw_logprobs" (log_softmax of the raw logits, as `hf` returns them); vLLM
cannot generate 0 tokens, so an echo request of max_tokens 0 asks for 1 and is ended once its
prompt's log-probs arrive. Everything that imports vllm lives in this module.
"""

from __future__ import annotations

from hybridrl.rollout.vllm import SEED_MASK, VLLMSettings, build_llm
from hybridrl.serve.backend import Backend
from hybridrl.serve.jobs import Inbox, Job, run_guarded
from hybridrl.serve.logprobs import RawLogprob

# the server's engine: raw log-probs (the training engine uses processed ones, the distribution it sampled from)
SERVE_ENGINE_KWARGS = {"logprobs_mode": "raw_logprobs", "max_logprobs": 20}


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, settings: VLLMSettings, eos_token_ids: list[int], seed: int):
        self.llm = build_llm(settings, seed)
        self.engine = self.llm.llm_engine
        self.eos = list(eos_token_ids)
        self.running: dict[str, Job] = {}

    def serve(self, inbox: Inbox) -> None:
        take_all = lambda queued: queued  # noqa: E731  (vLLM queues what it cannot schedule yet)
        while (new := inbox.take(take_all, block=not self.running)) is not None:
            run_guarded(new, lambda: self._add(new))
            running = list(self.running.values())
            run_guarded(running, self._step)
            self._drop_ended()

    def _add(self, jobs: list[Job]) -> None:
        from vllm.inputs import TokensPrompt

        for job in jobs:
            self.running[job.id] = job  # before add_request: a failure then fails this job too
            self.engine.add_request(job.id, TokensPrompt(prompt_token_ids=job.prompt_ids), self._params(job))

    def _params(self, job: Job):
        from vllm import SamplingParams

        s = job.sampling
        # greedy is temperature 0; top_k 0 is "off" in vLLM; EOS ids are ours (no tokenizer in the engine)
        return SamplingParams(n=1, max_tokens=max(1, job.max_tokens), stop_token_ids=self.eos, detokenize=False,
                              temperature=0.0 if s.greedy else s.temperature, top_p=1.0 if s.greedy else s.top_p,
                              top_k=0 if s.greedy or s.top_k < 1 else s.top_k, seed=job.key & SEED_MASK,
                              logprobs=job.logprobs, prompt_logprobs=job.prompt_logprobs)

    def _step(self) -> None:
        self._abort([job for job in self.running.values() if job.cancelled])
        if not self.engine.has_unfinished_requests():
            return
        for out in self.engine.step():
            job = self.running.get(out.request_id)
            if job is None:
                continue
            if job.prompt_logprobs is not None and out.prompt_logprobs is not None and not job.tokens:
                job.set_prompt_logprobs(_prompt_raw(job.prompt_ids, out.prompt_logprobs, job.prompt_logprobs))
            if job.max_tokens == 0:  # echo alone: the prompt's log-probs were all it asked for
                job.end("length")
                self._abort([job])
                continue
            sample = out.outputs[0]
            done = len(job.tokens)
            new = sample.token_ids[done:]
            lps = None if job.logprobs is None else [_raw(t, found, job.logprobs)
                                                     for t, found in zip(new, sample.logprobs[done:])]
            ended = job.push(new, lps)
            if out.finished:
                job.end("length")  # vLLM ended it without a deciding token (its context limit)
            elif ended:
                self._abort([job])

    def _abort(self, jobs: list[Job]) -> None:
        if jobs:
            self.engine.abort_request([job.id for job in jobs])
        for job in jobs:
            self.running.pop(job.id, None)

    def _drop_ended(self) -> None:
        """Forget finished and failed jobs (vLLM has already dropped the finished ones)."""
        for job_id in [i for i, job in self.running.items() if job.finish_reason is not None]:
            del self.running[job_id]

    def close(self) -> None:
        core = getattr(self.engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


def _raw(token: int, found: dict, k: int) -> RawLogprob:
    """vLLM's {token id: Logprob(logprob, rank)} of one position (the top k and the token itself) as a RawLogprob."""
    top = sorted((lp.rank, tid, lp.logprob) for tid, lp in found.items() if lp.rank is not None and lp.rank <= k)
    return RawLogprob(token, found[token].logprob, tuple((tid, lp) for _, tid, lp in top[:k]))


def _prompt_raw(ids: list[int], found: list, k: int) -> list[RawLogprob]:
    """vLLM's prompt_logprobs (None for the first token, then one dict per token) as RawLogprobs."""
    return [RawLogprob(ids[0], None)] + [_raw(t, d, k) for t, d in zip(ids[1:], found[1:])]
