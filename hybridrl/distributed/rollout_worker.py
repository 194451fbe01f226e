"""An asynchronous training's rollout worker (config/schema_async.py): one process of the rollout pool, with
a rollout engine that holds its own copy of the policy's weights.

The driver submits weight pushes and generations ahead of time (trainer/async_rollout.py). Ray runs an
actor's calls on a thread pool (max_concurrency > 1, so that `stacks` answers beside a stuck call) in no
guaranteed order, so every call carries a ticket, its submission number, and waits for its turn: a
generation sees exactly the weights pushed before it was submitted, whatever the timing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Optional

import torch

from hybridrl.batch import PromptBatch, Rollout, to_device
from hybridrl.config.plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.distributed.worker import Diagnosable
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.timeline import TimelineWorker, recorded, span
from hybridrl.workers.build import build_rollout_engine


class RolloutWorker(Diagnosable, TimelineWorker):
    def __init__(self, cfg: RLConfig, plan: BatchPlan, total_steps: int, rank: int, world_size: int, threads: int,
                 roles: tuple[str, ...] = ("rollout",)):
        torch.set_num_threads(threads)
        self.cfg, self.rank = cfg, rank
        self.engine = None
        self.version = -1  # the optimizer step of the weights held (-1: the model folder's)
        self._turn, self._next_turn = threading.Condition(), 0

    def rendezvous(self) -> tuple[str, int]:
        return "", 0  # rollout workers never talk to each other: no process group

    @recorded
    def setup(self, address: str, port: int, timeout_s: float) -> None:
        from hybridrl.models.loading import load_tokenizer

        self.engine = build_rollout_engine(self.cfg, load_tokenizer(self.cfg.actor_rollout_ref.model.path))

    def pid(self) -> int:
        return os.getpid()

    def load_weights(self, ticket: int, weights: dict, version: int) -> int:
        """Take the trainer's weights of optimizer step `version`; returns it."""
        with self._in_turn(ticket), span("load_weights", version=version):  # the span: the load, not the wait
            self.engine.load_weights(weights.items())
            self.version = version
            return version

    def generate(self, ticket: int, prompts: Optional[PromptBatch], n: int, sampling: SamplingParams,
                 call: int) -> Optional[Rollout]:
        """n responses per prompt as generate call `call` of the "train" stream (rollout/keyed.py); None for an
        empty shard."""
        with self._in_turn(ticket), span("generate", call=call):
            if prompts is None:
                return None
            self.engine.draws.set_call("train", call)
            device = next(self.engine.module.parameters()).device
            return to_device(generate_rollout(self.engine, to_device(prompts, device), n, sampling, "train"), "cpu")

    @contextlib.contextmanager
    def _in_turn(self, ticket: int):
        """Wait until `ticket` is this worker's next turn; the next ticket's turn comes when this one ends, also
        when it raised (the driver stops the run at that call: it waits on every push before a generation)."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_turn == ticket)
        try:
            yield
        finally:
            with self._turn:
                self._next_turn += 1
                self._turn.notify_all()
