"""An asynchronous training's rollout worker (config/schema_async.py): one process of the rollout pool, with
a rollout engine that holds its own copy of the policy's weights.

The driver submits weight pushes and generations ahead of time (trainer/async_rollout.py). Ray runs an
actor's calls on a thread pool (max_concurrency > 1, so that `stacks` answers beside a stuck call) in no
guaranteed order, so every call carries a ticket, its submission number, and waits for its turn: a
generation sees exactly the weights pushed before it was submitted, whatever the timing.

Partial rollouts (async_training.partial_rollout) relax this one way only: a push whose turn is next after the
generation running now does not wait for it to end. It offers its weights to that generation (rollout/partial.py),
which takes them at its next decode step; later calls still wait for the push's turn, so they see exactly the
pushes submitted before them. Which token a push lands on then depends on timing, and each token records it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Optional

import torch

from hybridrl.batch import PromptBatch, Rollout, to_device
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.distributed.worker import Diagnosable
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.partial import WeightInbox
from hybridrl.rollout.tp_layout import RolloutSeat, rank_cores
from hybridrl.timeline import TimelineWorker, recorded, span
from hybridrl.workers.build import build_rollout_engine


class RolloutWorker(Diagnosable, TimelineWorker):
    def __init__(self, cfg: RLConfig, plan: BatchPlan, total_steps: int, rank: int, world_size: int, threads: int,
                 roles: tuple[str, ...] = ("rollout",)):
        torch.set_num_threads(threads)
        self.cfg, self.rank, self.threads = cfg, rank, threads
        self.engine = None
        self.partial = cfg.async_training.partial_rollout
        self.inbox = WeightInbox()  # its version: the optimizer step of the weights held (-1: the model folder's)
        self._turn, self._next_turn = threading.Condition(), 0
        self._running: Optional[str] = None  # the call whose turn it is: "generate" | "load_weights" | None

    def rendezvous(self, spans_nodes: bool = False) -> tuple[str, int]:
        return "", 0  # rollout workers never talk to each other: no process group

    @recorded
    def setup(self, address: str, port: int, timeout_s: float, core_slot: int = 0) -> None:
        """Build the engine; `core_slot`: this worker's share of its node's cores (WorkerPool counts the trainer's
        workers on the node first, so a vllm engine here binds to cores after theirs: tp_layout.core_slots_after)."""
        from hybridrl.models.loading import load_tokenizer

        self.engine = build_rollout_engine(self.cfg, load_tokenizer(self.cfg.actor_rollout_ref.model.path),
                                           self.seat(core_slot))

    def seat(self, core_slot: int) -> RolloutSeat:
        """The engine's place: one whole engine per rollout worker (no tensor parallel: config/async_checks.py), its
        threads on the `core_slot`-th share of `threads` cores among those this process may use."""
        return RolloutSeat(self.rank, 0, rank_cores(core_slot, self.threads, sorted(os.sched_getaffinity(0))))

    def close(self) -> None:
        """End the engine (vLLM's processes and its /dev/shm folder) before Ray ends this process."""
        if self.engine is not None:
            self.engine.close()

    def load_weights(self, ticket: int, weights: dict, version: int) -> int:
        """Take the trainer's weights of optimizer step `version`; returns it. Partial rollouts: offered first to
        the generation running just before this push's turn."""
        offered = self.partial and self._offer(ticket, weights, version)
        with self._in_turn(ticket, "load_weights"), span("load_weights", version=version):  # the load, not the wait
            if not offered or self.inbox.take() is not None:  # not taken: the generation ended first
                self.engine.load_weights(weights.items())
                self.inbox.version = version
            return version

    def _offer(self, ticket: int, weights: dict, version: int) -> bool:
        """Wait until the call right before `ticket` runs (or has ended); if it is a generation, offer it the weights
        (True)."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_turn == ticket or (self._next_turn == ticket - 1
                                                                       and self._running == "generate"))
            if self._next_turn == ticket:
                return False
            self.inbox.offer(list(weights.items()), version)
            return True

    def generate(self, ticket: int, prompts: Optional[PromptBatch], n: int, sampling: SamplingParams,
                 call: int, sample_ids: Optional[torch.Tensor] = None) -> Optional[Rollout]:
        """n responses per prompt as generate call `call` of the "train" stream (rollout/keyed.py); None for an
        empty shard. `sample_ids`: see rollout/base.generate_rollout (the agents' calls fix them)."""
        with self._in_turn(ticket, "generate"), span("generate", call=call):
            if prompts is None:
                return None
            self.engine.draws.set_call("train", call)
            module = getattr(self.engine, "module", None)  # hf samples on its module's device; vllm takes CPU ids
            device = next(module.parameters()).device if module is not None else "cpu"
            rollout = generate_rollout(self.engine, to_device(prompts, device), n, sampling, "train",
                                       self.inbox if self.partial else None, sample_ids)
            return to_device(rollout, "cpu")

    @contextlib.contextmanager
    def _in_turn(self, ticket: int, kind: str):
        """Wait until `ticket` is this worker's next turn; the next ticket's turn comes when this one ends, also
        when it raised (the driver stops the run at that call: it waits on every push before a generation)."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_turn == ticket)
            self._running = kind
            self._turn.notify_all()  # a partial push waiting for this generation to start
        try:
            yield
        finally:
            with self._turn:
                self._next_turn, self._running = self._next_turn + 1, None
                self._turn.notify_all()
