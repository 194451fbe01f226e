"""The asynchronous agent source (trainer/agent_async.py) against a fake rollout pool, with the real proxy and openai
client: the staleness bound and the pushes in the pool's ticket order, each engine call's draw number and weights
version, the batch's lag (also when a push lands between two turns), failures raised by next_batch, and close
mid-step."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.errors import HybridRLError
from hybridrl.models.tiny import build_tokenizer
from hybridrl.rollout.base import SamplingParams
from hybridrl.trainer.agent_async import SPILL, SPILL_STEP, AsyncAgentSource, draw_call
from hybridrl.trainer.agent_source import AgentSettings
from hybridrl.trainer.async_schedule import AsyncSchedule

TURN = [81, 77, 2]  # every completion: "ok" and EOS
GROUPS, N, TURNS = 2, 2, 2  # prompts per step, agents per prompt, completions per agent


def log_prob(call: int) -> float:
    return -(call + 1) / 8  # exact in binary: each call's tokens say which call made them


class FakePool:
    """RolloutGroup's surface. Records ("push", version) and ("submit", call, rows) in ticket order; `hold`: an
    Event a call's gather waits for, by call number; `fail`: the call whose gather raises."""

    def __init__(self, hold: dict | None = None, fail: int | None = None):
        self.log, self.hold, self.fail = [], hold or {}, fail

    def push_weights(self, weights, version):
        self.log.append(("push", version))
        return [("push", version)]

    def submit(self, batch: PromptBatch, n, sampling, call, sample_ids):
        assert n == 1 and len(sample_ids) == len(batch.index)
        self.log.append(("submit", call, sample_ids.tolist()))
        return call, batch

    def wait_pushes(self, refs):
        pass

    def gather(self, refs) -> Rollout:
        call, batch = refs
        if call in self.hold:
            assert self.hold[call].wait(10)
        if call == self.fail:
            raise RuntimeError("rollout worker 0 died")
        k = len(batch.index)
        ids = torch.tensor([TURN] * k)
        return Rollout(batch, ids, torch.ones_like(ids), torch.full(ids.shape, log_prob(call)), torch.arange(k))


class Sampler:
    def __init__(self):
        self.step = 0

    def next_batch(self) -> list[int]:
        self.step += 1
        return [10 * self.step + g for g in range(GROUPS)]


def prompts(index: list[int]) -> PromptBatch:
    k = len(index)
    return PromptBatch(torch.full((k, 3), 7), torch.ones(k, 3, dtype=torch.long), ["toy"] * k, ["1"] * k, index)


async def two_turns(client, row):
    messages = [{"role": "user", "content": f"row {row['index']}"}]
    for _ in range(TURNS):
        r = await client.chat.completions.create(model="policy", messages=messages)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "again"}]
    return 1.0


def source(pool, agent=two_turns, total=3, ahead=1, prox=False, timeout_s=10.0):
    reward = SimpleNamespace(tokenizer=build_tokenizer())
    inputs = SimpleNamespace(train_data=SimpleNamespace(collate=lambda idx, pad: prompts(idx)), pad_id=0,
                             sampler=Sampler(), policy=SimpleNamespace(engine_weights=lambda: "weights"),
                             sampling=SamplingParams(16, 1.0), reward=reward)
    settings = AgentSettings(timeout_s, TURNS, 50, "zero", 256, 256)
    schedule = AsyncSchedule(total_steps=total, sync_every=1, ahead=ahead, prox=prox, reaches_started=True)
    return AsyncAgentSource(inputs, agent, settings, N, pool, schedule)


def wait_until(condition, timeout_s=10.0):
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_draw_numbers():
    # step 3, round 1 of at most 2: (3 - 1) x 2 + 1 = 5; round 2 (past max_turns) of step 2: 2^40 + 1 x 2^20 + 2
    assert [draw_call(1, 0, 2), draw_call(1, 1, 2), draw_call(3, 1, 2)] == [0, 1, 5]
    assert draw_call(2, 2, 2) == SPILL + SPILL_STEP + 2 == 2 ** 40 + 2 ** 20 + 2


def test_staleness_0_waits_for_each_push_and_trains_on_policy():
    pool = FakePool()
    src = source(pool)
    batches, metrics = [], []
    try:
        src.start(1)
        for step in (1, 2, 3):
            m = {}
            batches.append(src.next_batch(step, m))
            src.after_update(step, m)
            metrics.append(m)
    finally:
        src.close()
    rows = lambda s: [10 * s, 10 * s, 10 * s + 1, 10 * s + 1]  # noqa: E731  each prompt n = 2 times
    ids = lambda s: [(r << 20) | (a % N) for a, r in enumerate(rows(s))]  # noqa: E731  (row, sample j)
    # each step's two rounds submitted only after the previous step's weights were pushed; no push after the last
    assert pool.log == [("push", 0), ("submit", 0, ids(1)), ("submit", 1, ids(1)),
                        ("push", 1), ("submit", 2, ids(2)), ("submit", 3, ids(2)),
                        ("push", 2), ("submit", 4, ids(3)), ("submit", 5, ids(3))]
    assert [(b.lag, b.behaviour) for b in batches] == [(0, None)] * 3
    assert [(m["async/staleness_max"], m["async/version"], m["async/turn_versions"]) for m in metrics] == [
        (0.0, 0.0, 1.0), (0.0, 1.0, 1.0), (0.0, 2.0, 1.0)]
    for step, b in enumerate(batches, 1):  # every row: its two turns' tokens, with log-probs of calls 2(step-1), +1
        r = b.rollout
        assert r.prompts.index == rows(step) and b.reward.scores.tolist() == [1.0] * 4
        for i in range(GROUPS * N):
            lps = r.rollout_log_probs[i][r.response_mask[i].bool()].tolist()
            assert lps == [log_prob(2 * step - 2)] * 3 + [log_prob(2 * step - 1)] * 3


def test_a_push_between_two_turns_makes_the_batch_as_stale_as_its_oldest_turn():
    """staleness 1 (B = 2): steps 1 and 2 run on version 0; step 3 starts on version 1, and version 2 is pushed
    while its first round is held, so its second round uses version 2: lag (3 - 1) - 1 = 1, mean over calls 0.5."""
    held = threading.Event()
    pool = FakePool(hold={4: held})
    src = source(pool, ahead=2, prox=True)
    try:
        src.start(1)
        wait_until(lambda: src.ready.qsize() == 2)  # both steps made ahead, before any push
        got = []
        for step in (1, 2):
            m = {}
            b = src.next_batch(step, m)
            got.append((b.lag, b.behaviour, m["async/staleness_max"]))
            src.after_update(step, m)  # version 1 then 2
            if step == 1:  # step 3's first round submitted on version 1 (and held), before version 2 is pushed
                wait_until(lambda: any(e[:2] == ("submit", 4) for e in pool.log))
        held.set()
        m = {}
        b = src.next_batch(3, m)
    finally:
        src.close()
    assert got == [(0, None, 0.0), (1, "prox", 1.0)]
    assert (b.lag, b.behaviour, m["async/staleness_max"], m["async/staleness_mean"], m["async/turn_versions"]) == (
        1, "prox", 1.0, 0.5, 2.0)
    order = [e[:2] for e in pool.log]
    assert order == [("push", 0), ("submit", 0), ("submit", 1), ("submit", 2), ("submit", 3),
                     ("push", 1), ("submit", 4), ("push", 2), ("submit", 5)]


def test_an_engine_failure_fails_the_next_batch_and_later_steps_do_not_hang():
    src = source(FakePool(fail=2))
    try:
        src.start(1)
        src.next_batch(1, {})
        src.after_update(1, {})
        with pytest.raises(HybridRLError, match="step 2: the rollout engine failed .*RuntimeError: rollout worker 0 "
                                                "died") as e:
            src.next_batch(2, {})
        assert isinstance(e.value.__cause__, RuntimeError)
    finally:
        src.close()


def test_an_exception_in_the_runner_is_raised_as_it_was():
    src = source(FakePool())
    boom = ValueError("the sampler's copy broke")

    def broken(step, lookahead):
        raise boom
    src._agents = broken
    try:
        src.start(1)
        with pytest.raises(ValueError) as e:
            src.next_batch(1, {})
        assert e.value is boom
    finally:
        src.close()


def test_close_mid_step_cancels_the_agents_and_returns_promptly():
    started = threading.Event()

    async def hangs(client, row):
        started.set()
        await asyncio.sleep(60)

    src = source(FakePool(), agent=hangs, timeout_s=60.0)
    src.start(1)
    assert started.wait(10)
    runner, t0 = src.runner, time.monotonic()
    src.close()
    assert time.monotonic() - t0 < 5 and not runner.is_alive() and src.server is None
