"""`trainer.backend=ray`: the worker processes and the per-role groups the driver calls.

`RayRoles` starts (or joins) a Ray cluster and one `RoleWorker` actor per data-parallel rank
(`trainer.n_gpus_per_node * trainer.nnodes`), wires them into one torch.distributed process group
(gloo), and exposes `policy`, `reference` and `critic` groups with the same typed methods as the
local roles: the driver loop does not know which backend it runs on. Each group method splits its
batch by rank, calls every worker, waits with a deadline and gathers.

Failures never hang the driver: every wait has `trainer.worker_timeout_s`; a worker that raises
is reported with its traceback, role, method and rank; a dead worker or one past the deadline
stops the run naming the phase and rank, with the stuck workers' Python stacks.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout, Sequences, TrainBatch, concat_rollouts, num_rows, select
from hybridrl.config.plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import critic_batch_plan, needs_critic, needs_reference
from hybridrl.distributed.worker import RoleWorker
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.flops import ModelShape
from hybridrl.rollout.base import SamplingParams
from hybridrl.workers.critic import CriticBatch


class WorkerError(HybridRLError):
    """A worker raised, died, or ran past trainer.worker_timeout_s."""


def shard_rows(n: int, world: int) -> list[torch.Tensor]:
    """Rank r's rows of an n-row batch: consecutive, sizes differing by at most one (rank order = row order)."""
    sizes = [n // world + (1 if r < n % world else 0) for r in range(world)]
    starts = [sum(sizes[:r]) for r in range(world)]
    return [torch.arange(s, s + size) for s, size in zip(starts, sizes)]


class RayRoles:
    def __init__(self, cfg: RLConfig, plan: BatchPlan, total_steps: int, pad_id: int, log=print,
                 worker_cls=RoleWorker):
        import ray

        tr = cfg.trainer
        self.world = tr.n_gpus_per_node * tr.nnodes
        self.timeout_s = tr.worker_timeout_s
        self.pad_id = pad_id  # re-pads the gathered rollouts
        init = cfg.ray_kwargs.ray_init
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=init.address, num_cpus=init.num_cpus if init.address is None else None,
                     include_dashboard=False, log_to_driver=True, configure_logging=False)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < self.world:
            self.close()
            raise ConfigError(f"trainer.n_gpus_per_node * trainer.nnodes = {self.world} workers need {self.world} CPUs, "
                              f"the Ray cluster has {cpus}; lower trainer.n_gpus_per_node, or raise "
                              "ray_kwargs.ray_init.num_cpus / add nodes")
        threads = max(1, cpus // self.world)
        remote = ray.remote(worker_cls).options(num_cpus=1, max_concurrency=2)  # 2: stacks() beside a stuck call
        self.actors = [remote.remote(cfg, plan, total_steps, rank, self.world, threads) for rank in range(self.world)]
        try:
            address, port = self.call("setup", "rendezvous", [self.actors[0].rendezvous.remote()])[0]
            self.call("setup", "setup", [a.setup.remote(address, port, self.timeout_s) for a in self.actors])
            self.node_ids = self.call("setup", "node_id", [a.node_id.remote() for a in self.actors])
        except BaseException:  # no worker outlives a failed start
            self.close()
            raise
        log(f"backend=ray: {self.world} workers ({threads} torch threads each) on {len(set(self.node_ids))} node(s), "
            f"process group at {address}:{port}")
        self.policy = PolicyGroup(self, plan.mini_batch_responses_per_worker)
        self.reference = ReferenceGroup(self) if needs_reference(cfg) else None
        self.critic = (CriticGroup(self, critic_batch_plan(cfg).mini_batch_responses_per_worker)
                       if needs_critic(cfg) else None)

    def map_rows(self, role: str, method: str, call: Callable, seqs: Sequences) -> Tensor:
        """`call(actor)` is a worker's remote method; rank r gets its consecutive rows of `seqs`, and
        the per-row results come back concatenated in row order."""
        shards = [select(seqs, rows) for rows in shard_rows(num_rows(seqs), self.world)]
        return torch.cat(self.call(role, method, [call(a).remote(s) for a, s in zip(self.actors, shards)]))

    def nodes(self) -> list[str]:
        """The Ray node id of each rank."""
        return list(self.node_ids)

    def call(self, role: str, method: str, refs: list) -> list:
        """The results of one call per rank (refs[i] is rank i's), in rank order. Waits at most
        trainer.worker_timeout_s in all; the first failure stops the run."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        deadline = time.monotonic() + self.timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise self._timeout(role, method, [refs.index(r) for r in pending])
            rank = refs.index(ready[0])
            try:
                ray.get(ready[0])
            except RayTaskError as e:
                raise WorkerError(f"{role}.{method} raised on rank {rank} of {self.world}:\n{e}") from None
            except RayActorError as e:
                raise WorkerError(f"{role}.{method}: the worker of rank {rank} of {self.world} died "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:300]}); the run stops, resume it "
                                  "from the last checkpoint") from None
        return ray.get(refs)

    def _timeout(self, role: str, method: str, stuck: list[int]) -> WorkerError:
        import ray

        stacks = []
        for rank in stuck[:4]:  # a rank stuck in a collective waits for the culprit: show several
            try:
                stack = ray.get(self.actors[rank].stacks.remote(), timeout=10)
            except Exception as e:  # the worker cannot even answer: say so rather than wait again
                stack = f"(no stack: {type(e).__name__})"
            stacks.append(f"--- stack of rank {rank} ---\n{stack}")
        return WorkerError(f"{role}.{method} did not finish on rank(s) {stuck} of {self.world} within "
                           f"trainer.worker_timeout_s={self.timeout_s:g}s; the run stops (raise the timeout if the "
                           "step is just slow; a rank waiting in a collective waits for another one)\n"
                           + "\n".join(stacks))

    def close(self) -> None:
        import ray

        for actor in getattr(self, "actors", []):
            ray.kill(actor)
        self.actors = []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()


def update_rows(n: int, world: int, mini_per_worker: int) -> list[torch.Tensor]:
    """Rank r's rows of an n-row training batch: its 1/world slice of every mini-batch, so that
    mini-batch j over all ranks holds the rows mini-batch j holds in one process (n is a whole
    number of mini-batches: the batch plan checks it). Without actor.shuffle the updates are then
    those of one process."""
    size = mini_per_worker * world
    if n % size:
        raise HybridRLError(f"{n} rows are not whole mini-batches of {size} (the batch plan should have refused this)")
    return [torch.cat([torch.arange(j + r * mini_per_worker, j + (r + 1) * mini_per_worker) for j in range(0, n, size)])
            for r in range(world)]


class PolicyGroup:
    """The policy of every rank, with the local Policy's methods."""

    def __init__(self, roles: RayRoles, mini_per_worker: int):
        self.r, self.mini_per_worker = roles, mini_per_worker

    def generate(self, prompts: PromptBatch, n: int, sampling: SamplingParams, stream: str = "train") -> Rollout:
        shards = shard_rows(len(prompts.index), self.r.world)
        refs = [a.generate.remote(select(prompts, rows) if len(rows) else None, n, sampling, stream)
                for a, rows in zip(self.r.actors, shards)]
        parts = [p for p in self.r.call("policy", "generate", refs) if p is not None]
        return concat_rollouts(parts, self.r.pad_id)

    def log_probs(self, seqs: Sequences) -> Tensor:
        return self.r.map_rows("policy", "log_probs", lambda a: a.policy_log_probs, seqs)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        shards = [select(batch, rows) for rows in update_rows(num_rows(batch), self.r.world, self.mini_per_worker)]
        return self.r.call("policy", "update", [a.policy_update.remote(s) for a, s in zip(self.r.actors, shards)])[0]

    def model_shape(self) -> ModelShape:
        return self.r.call("policy", "model_shape", [self.r.actors[0].model_shape.remote()])[0]

    def state_dict(self) -> dict:  # the replicas are identical: rank 0 speaks for all
        return self.r.call("policy", "state_dict", [self.r.actors[0].policy_state.remote()])[0]

    def load_state_dict(self, state: dict) -> None:
        self.r.call("policy", "load_state_dict", [a.policy_load_state.remote(state) for a in self.r.actors])

    def save_pretrained(self, folder: str) -> None:
        self.r.call("policy", "save_pretrained", [self.r.actors[0].policy_save.remote(folder)])

    def load_pretrained(self, folder: str) -> None:  # every rank reads the folder (a shared filesystem)
        self.r.call("policy", "load_pretrained", [a.policy_load.remote(folder) for a in self.r.actors])


class ReferenceGroup:
    def __init__(self, roles: RayRoles):
        self.r = roles

    def log_probs(self, seqs: Sequences) -> Tensor:
        return self.r.map_rows("reference", "log_probs", lambda a: a.reference_log_probs, seqs)


class CriticGroup:
    def __init__(self, roles: RayRoles, mini_per_worker: int):
        self.r, self.mini_per_worker = roles, mini_per_worker

    def values(self, seqs: Sequences) -> Tensor:
        return self.r.map_rows("critic", "values", lambda a: a.critic_values, seqs)

    def update(self, batch: CriticBatch) -> dict[str, float]:
        shards = [select(batch, rows) for rows in update_rows(num_rows(batch), self.r.world, self.mini_per_worker)]
        return self.r.call("critic", "update", [a.critic_update.remote(s) for a, s in zip(self.r.actors, shards)])[0]

    def state_dict(self) -> dict:
        return self.r.call("critic", "state_dict", [self.r.actors[0].critic_state.remote()])[0]

    def load_state_dict(self, state: dict) -> None:
        self.r.call("critic", "load_state_dict", [a.critic_load_state.remote(state) for a in self.r.actors])

    def save_pretrained(self, folder: str) -> None:
        self.r.call("critic", "save_pretrained", [self.r.actors[0].critic_save.remote(folder)])

    def load_pretrained(self, folder: str) -> None:
        self.r.call("critic", "load_pretrained", [a.critic_load.remote(folder) for a in self.r.actors])
