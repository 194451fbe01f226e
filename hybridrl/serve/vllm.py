"""vLLM backend: vLLM's engine with its own continuous batching, stepped by the worker thread.

Each job becomes one vLLM request (token ids in, `detokenize=False`: the job detokenizes and
applies stop strings itself, as with `hf`, so both backends return text the same way). The worker
adds newly queued jobs between engine steps, pushes each step's new tokens to their jobs (a
RequestOutput carries the cumulative token ids of its request) and aborts the requests whose job
ended first (stop string, client gone). Requests are seeded from their job's key, so a seeded
request is reproducible, though vLLM draws different tokens than `hf` does for the same seed.
Everything that imports vllm lives in this module.
"""

from __future__ import annotations

from hybridrl.rollout.vllm import SEED_MASK, VLLMSettings, build_llm
from hybridrl.serve.backend import Backend
from hybridrl.serve.jobs import Inbox, Job, run_guarded


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
        return SamplingParams(n=1, max_tokens=job.max_tokens, stop_token_ids=self.eos, detokenize=False,
                              temperature=0.0 if s.greedy else s.temperature, top_p=1.0 if s.greedy else s.top_p,
                              top_k=0 if s.greedy or s.top_k < 1 else s.top_k, seed=job.key & SEED_MASK)

    def _step(self) -> None:
        self._abort([job for job in self.running.values() if job.cancelled])
        if not self.engine.has_unfinished_requests():
            return
        for out in self.engine.step():
            job = self.running.get(out.request_id)
            if job is None:
                continue
            ended = job.push(out.outputs[0].token_ids[len(job.tokens):])
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
