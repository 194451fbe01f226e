"""Dynamic batching (serve/hf.py): which queued jobs share a batch, that a batch gives every request the
text it gets alone, per-job max_tokens and cancellation inside a batch, and the engine's step callback."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import torch
from serve_helpers import LIMITS, MODEL, make_service

from hybridrl.batch import left_pad
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.serve.app import AppSettings, build_app
from hybridrl.serve.hf import HFBackend, select_batch
from hybridrl.serve.jobs import Inbox, Job, Sampling
from hybridrl.serve.text import TextStream


def job(prompt_len=3, max_tokens=4, sampling=Sampling(), events=None) -> Job:
    sink = events.append if events is not None else (lambda e: None)
    return Job(0, [5] * prompt_len, sampling, max_tokens, 0, TextStream(lambda ids: ""), frozenset([2]), sink)


def test_select_batch_takes_the_oldest_and_the_later_jobs_that_fit_with_it():
    hot, greedy = Sampling(1.2), Sampling(0.0, top_p=0.5)
    q = [job(sampling=hot), job(sampling=greedy), job(sampling=hot), job(sampling=Sampling(0.0)), job(sampling=hot)]
    assert select_batch(q, limit=8, max_model_len=100) == [q[0], q[2], q[4]]
    assert select_batch(q, limit=2, max_model_len=100) == [q[0], q[2]]
    assert select_batch(q[1:], limit=8, max_model_len=100) == [q[1], q[3]]  # greedy ignores top_p


def test_select_batch_keeps_longest_prompt_plus_most_tokens_within_the_context():
    q = [job(prompt_len=50, max_tokens=10), job(prompt_len=10, max_tokens=45), job(prompt_len=55, max_tokens=5)]
    # 50 + 45 > 64: the second waits; 55 + 10 = 65 > 64 too
    assert select_batch(q, limit=8, max_model_len=64) == [q[0]]
    assert select_batch(q, limit=8, max_model_len=65) == [q[0], q[2]]


def test_inbox_take_leaves_the_rest_queued_in_order_and_drops_cancelled_jobs():
    inbox, jobs = Inbox(), [job() for _ in range(4)]
    inbox.put(jobs)
    jobs[1].cancelled = True
    assert inbox.take(lambda q: q[1:2]) == [jobs[2]]
    assert inbox.take(lambda q: q) == [jobs[0], jobs[3]] and len(inbox) == 0
    assert inbox.take(lambda q: q, block=False) == []
    inbox.close()
    assert inbox.take(lambda q: q) is None


class GatedHF(HFBackend):
    """Records each batch; takes nothing until the test opens the gate (all requests queued by then)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.gate, self.batches = threading.Event(), []

    def serve(self, inbox):
        self.gate.wait()
        super().serve(inbox)

    def generate(self, jobs):
        self.batches.append([(j.sampling, j.max_tokens) for j in jobs])
        super().generate(jobs)


async def _concurrently(app, service, bodies: list[dict]) -> list[dict]:
    """Send every body at once; open the gate (if still closed) once all their jobs are queued."""
    gate = service.backend.gate
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        tasks = [asyncio.create_task(c.post("/v1/completions", json=b)) for b in bodies]
        while not gate.is_set() and len(service.inbox) < len(bodies):
            await asyncio.sleep(0.01)
        gate.set()
        return [(await t).json() for t in tasks]


def test_compatible_requests_share_a_batch_and_get_the_text_they_get_alone(tiny):
    service = make_service(tiny, GatedHF)
    app = build_app(service, AppSettings(MODEL, None, LIMITS))
    base = {"model": MODEL, "prompt": "hello world", "temperature": 1.5}
    bodies = [{**base, "seed": s, "max_tokens": 6 + s} for s in range(4)]  # own max_tokens each
    bodies += [{**base, "prompt": "What is", "temperature": 0, "max_tokens": 5 + s} for s in range(2)]
    together = asyncio.run(_concurrently(app, service, bodies))
    hot, greedy = Sampling(1.5), Sampling(0.0)
    # arrival order within the burst is up to the thread pool that tokenizes: compare batches as sets
    batches = sorted((sorted(b, key=lambda x: x[1]) for b in service.backend.batches[:2]), key=len, reverse=True)
    assert batches == [[(hot, 6), (hot, 7), (hot, 8), (hot, 9)], [(greedy, 5), (greedy, 6)]]
    assert len(service.backend.batches) == 2
    alone = [asyncio.run(_concurrently(app, service, [b]))[0] for b in bodies]
    assert [len(b) for b in service.backend.batches[2:]] == [1] * 6
    for t, a, b in zip(together, alone, bodies):
        assert t["choices"][0]["text"] == a["choices"][0]["text"] and t["usage"] == a["usage"]
        assert t["usage"]["completion_tokens"] <= b["max_tokens"]
    assert {t["choices"][0]["text"] for t in together[:4]} != {together[0]["choices"][0]["text"]}
    service.close()


def test_each_job_of_a_batch_keeps_its_own_max_tokens_and_a_cancelled_one_stops(tiny):
    backend = HFBackend(tiny.model, tiny.eos, tiny.tok.pad_token_id, 8, LIMITS.max_model_len)
    decode = lambda ids: tiny.tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    prompt = tiny.tok("What is")["input_ids"]
    events = [[], [], []]
    jobs = [Job(i, prompt, Sampling(0.0), m, 0, TextStream(decode), frozenset(tiny.eos), events[i].append)
            for i, m in enumerate((3, 20, 20))]
    jobs[2].deliver = lambda e: (events[2].append(e), setattr(jobs[2], "cancelled", True))  # gone after 1 token
    backend.generate(jobs)
    assert [e.finish_reason for e in events[0]][-1] == "length" and len(jobs[0].tokens) == 3
    assert len(jobs[1].tokens) == 20 and jobs[1].finish_reason == "length"
    assert len(jobs[2].tokens) == 1 and jobs[2].finish_reason is None
    assert jobs[1].tokens[:3] == jobs[0].tokens  # same prompt, greedy


@pytest.mark.slow  # 18 s of decoding
def test_step_callback_ends_rows_and_leaves_the_others_unchanged(tiny):
    engine = HFRolloutEngine(tiny.model, tiny.eos, tiny.tok.pad_token_id, max_num_seqs=2)  # 2 chunks of 2 rows
    ids, mask = left_pad([tiny.tok(p)["input_ids"] for p in ("What is", "hello world", "1+2=", "What is")], 0, "cpu")
    sampling, keys = SamplingParams(12, temperature=1.3), torch.tensor([1, 2, 3, 4])
    free = engine.generate_keyed(ids, mask, sampling, keys)
    seen = []

    def on_step(start, t, tokens, live, logits):  # end row 1 after its 2nd token and row 3 at once
        seen.append((start, t, len(tokens)))
        rows = torch.arange(start, start + len(tokens))
        return ((rows == 1) & (t >= 1)) | (rows == 3)

    cut = engine.generate_keyed(ids, mask, sampling, keys, on_step)
    assert {s for s, _, n in seen} == {0, 2} and all(n == 2 for _, _, n in seen)
    assert cut.response_mask[1].sum() == min(2, free.response_mask[1].sum()) and cut.response_mask[3].sum() == 1
    for row in (0, 2):
        n = int(free.response_mask[row].sum())
        assert cut.response_ids[row, :n].tolist() == free.response_ids[row, :n].tolist()
    assert cut.response_ids[3, 0] == free.response_ids[3, 0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_never_blocks_the_event_loop(tiny, stream):
    """While a long batch generates, the loop keeps ticking (handlers only await the request's queue)."""
    service = make_service(tiny)
    app = build_app(service, AppSettings(MODEL, None, LIMITS))
    body = {"model": MODEL, "prompt": "What is", "max_tokens": 64, "temperature": 0, "n": 4, "stream": stream}

    async def run():
        gaps, done = [], asyncio.Event()

        async def ticker():
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            tick = asyncio.create_task(ticker())
            r = await c.post("/v1/completions", json=body)
            done.set()
            await tick
        return r, gaps

    r, gaps = asyncio.run(run())
    assert r.status_code == 200 and len(gaps) > 5
    assert max(gaps) < 0.25  # one decode step of the tiny model is ~1 ms; a blocked loop would wait for all 64
    service.close()
