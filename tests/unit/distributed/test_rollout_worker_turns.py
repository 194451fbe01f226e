"""The rollout worker's call order (distributed/rollout_worker.py) without Ray: calls on threads, as Ray runs them.
A push overtakes the running generation only with partial rollouts; a later generation sees it either way."""

import threading
import time
from types import SimpleNamespace

import pytest
import torch

from hybridrl.distributed import rollout_worker
from hybridrl.distributed.rollout_worker import RolloutWorker


class FakeEngine:
    def __init__(self):
        self.loaded = []
        self.draws = SimpleNamespace(set_call=lambda stream, call: None)
        self.module = torch.nn.Linear(1, 1)

    def load_weights(self, items):
        self.loaded.append(dict(items)["v"])


def fake_generation(log: list, go: threading.Event):
    """generate_rollout standing in: the version held at its start, then after `go`, at a decode-step boundary
    where it takes offered weights as rollout/hf.py does."""
    def generate(engine, prompts, n, sampling, stream, inbox, sample_ids=None):
        start = engine.loaded[-1] if engine.loaded else -1
        go.wait(5)
        if inbox is not None and (got := inbox.take()) is not None:
            engine.load_weights(got[0])
            inbox.version = got[1]
        log.append((start, engine.loaded[-1] if engine.loaded else -1))
        return "rollout"
    return generate


@pytest.mark.parametrize("partial", [True, False])
def test_a_push_overtakes_the_running_generation_only_in_partial_mode(monkeypatch, partial):
    log, go = [], threading.Event()
    monkeypatch.setattr(rollout_worker, "generate_rollout", fake_generation(log, go))
    monkeypatch.setattr(rollout_worker, "to_device", lambda x, device: x)
    cfg = SimpleNamespace(async_training=SimpleNamespace(partial_rollout=partial))
    worker = RolloutWorker(cfg, None, 1, 0, 1, 1)
    worker.engine = FakeEngine()
    calls = [lambda: worker.generate(0, "p", 1, None, 0), lambda: worker.load_weights(1, {"v": 1}, 1),
             lambda: worker.generate(2, "p", 1, None, 1)]
    threads = [threading.Thread(target=c) for c in reversed(calls)]  # submitted out of order, as Ray may run them
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while partial and worker.inbox._offered is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the push reaches the running generation
    time.sleep(0.1)
    go.set()
    for t in threads:
        t.join(5)
    # generation 0 starts with the model's weights and, in partial mode only, ends with the push's; generation 2
    # starts with them in both modes; the weights are loaded exactly once
    assert log == [(-1, 1 if partial else -1), (1, 1)]
    assert worker.engine.loaded == [1] and worker.inbox.version == 1
