"""`trainer.backend=ray`: the worker processes and the per-role groups the driver calls.

`RayRoles` starts (or joins) a Ray cluster and its resource pools: the actor pool, one `RoleWorker`
per data-parallel rank (`trainer.n_gpus_per_node * trainer.nnodes`) hosting the policy, reference
and critic (the hybrid engine), plus a critic pool (`critic.enable_resource_pool` or `critic.n_workers`) and a reward-model pool
(`reward_model.enable_resource_pool`) and a teacher pool (`distillation.enable_resource_pool`) when asked for. Each pool is one torch.distributed process
group (gloo on CPU; gloo for CPU tensors and NCCL for CUDA ones on GPU). It exposes `policy`,
`reference`, `critic` and `reward_model` groups with the same typed methods as the local roles:
the driver loop does not know which backend it runs on. Each group method splits its batch by
rank, calls every worker of its pool, waits with a deadline and gathers.

Failures never hang the driver: every wait has `trainer.worker_timeout_s`; a worker that raises
is reported with its traceback, role, method and rank; a dead worker or one past the deadline
stops the run naming the phase and rank, with the stuck workers' Python stacks.

With trainer.profile_timeline each worker records its calls on the track "<pool> rank <r>" and
`RayRoles.timeline_events` takes their new spans (hybridrl/timeline.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from typing import Callable, Mapping, Optional

import torch
from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout, Sequences, TrainBatch, concat_rollouts, num_rows, select
from hybridrl.batching import balanced_shards, shard_rows
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.plan.levers import (
    actor_update_batching,
    critic_update_batching,
    critic_values_batching,
    log_prob_batching,
    ref_batching,
)
from hybridrl.plan.placement import pool_roles, pool_sizes
from hybridrl.config.schema import RLConfig
from hybridrl.plan.roles import critic_batch_plan, needs_critic, needs_reference, needs_teacher
from hybridrl.distributed.cluster import init_ray
from hybridrl.distributed.failures import blame_order, died, failure_of
from hybridrl.distributed.placement_group import PoolPlacement, check_same_group, driver_placement_group, worker_cpus
from hybridrl.distributed.processes import end_processes, record
from hybridrl.distributed.rollout_group import RolloutGroup, rollout_pool_worker
from hybridrl.distributed.worker import RoleWorker
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.library_logs import adopt_logger, logs_dir, worker_log
from hybridrl.models.flops import ModelShape
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.tp_layout import RolloutLayout, core_slots_after
from hybridrl.workers.critic import CriticBatch


class WorkerError(HybridRLError):
    """A worker raised, died, or ran past trainer.worker_timeout_s."""


FAILURE_GRACE_S = 2.0  # after a first failure, how long the other ranks may take to show theirs
STACKS_WAIT_S = 2.0  # after the deadline, how long the stuck ranks may take to send their stacks
# at the end, how long the workers may take to end their engines (vLLM: ~4 s measured alone, more under load)
CLOSE_WAIT_S = 30.0
# after a failure the run is over: a rank stuck ending its engine (a stopped vLLM process) is not waited on for
# long; ray.kill ends its engine's processes with it
FAILED_CLOSE_WAIT_S = 5.0
# after ray.kill, how long this node's workers may take to exit before they get SIGKILL (under 0.1 s measured)
EXIT_WAIT_S = 5.0


class WorkerPool:
    """The Ray actors of one resource pool: ranks 0..world-1 of their own torch.distributed group,
    each hosting `roles` (a subset of policy, reference, teacher, critic, reward_model)."""

    def __init__(self, name: str, roles: tuple[str, ...], world: int, cfg: RLConfig, plan: BatchPlan,
                 total_steps: int, threads: int, worker_cls=RoleWorker, concurrency: int = 2,
                 cores_taken: Optional[Mapping[str, int]] = None):
        """`cores_taken` (the rollout pool): workers of the earlier pools per node; each rank's setup gets the next
        share of its node's cores after theirs (its engine's threads bind there: tp_layout.core_slots_after)."""
        import ray

        self.name, self.roles, self.world = name, roles, world
        self.timeout_s = cfg.trainer.worker_timeout_s
        self.silent: set[int] = set()  # ranks that answered nothing past a deadline: close() does not wait on them
        self.failed = False  # a call failed or timed out: close() waits FAILED_CLOSE_WAIT_S, not CLOSE_WAIT_S
        gpus = 1 if cfg.trainer.device == "cuda" else 0
        self.layout = PoolPlacement(cfg, name, world, gpus)  # over several nodes: a bundle per node
        # max_concurrency >= 2: stacks() answers beside a stuck call (the rollout pool queues more calls)
        remote = ray.remote(worker_cls)
        self.actors = [remote.options(num_cpus=1, num_gpus=gpus, max_concurrency=concurrency,
                                      **self.layout.options(rank))
                       .remote(cfg, plan, total_steps, rank, world, threads, roles) for rank in range(world)]
        self.logs = [worker_log(cfg.trainer.default_local_dir, name, rank) for rank in range(world)]
        try:
            # first: what the worker and its engines print from here on goes to its file, not the console
            self.call("setup", "send_output_to", [a.send_output_to.remote(path) for a, path in zip(self.actors, self.logs)])
            self.pids = self.call("setup", "pid", [a.pid.remote() for a in self.actors])
            if cfg.trainer.profile_timeline is not None:  # before setup, so that it is recorded too
                self.call("setup", "timeline_enable", [a.timeline_enable.remote(f"{name} rank {rank}", rank)
                                                       for rank, a in enumerate(self.actors)])
            self.node_ids = self.call("setup", "node_id", [a.node_id.remote() for a in self.actors])
            here = ray.get_runtime_context().get_node_id()  # the workers on the driver's node: close() waits for them
            self.local_processes = record(p for p, n in zip(self.pids, self.node_ids) if n == here)
            # across nodes the ranks meet at rank 0's Ray node address, not its host name (address.py)
            spans_nodes = len(set(self.node_ids)) > 1
            self.address, self.port = self.call("setup", "rendezvous", [self.actors[0].rendezvous.remote(spans_nodes)])[0]
            # collectives time out at twice the driver's deadline: the driver sees a hang first and reports it
            # with the stuck ranks' stacks; the collective timeout only frees ranks if the driver is gone
            self.placement_groups = self.call("setup", "placement_group_id",
                                              [a.placement_group_id.remote() for a in self.actors])
            slots = ([(s,) for s in core_slots_after(self.node_ids, cores_taken)] if cores_taken is not None
                     else [()] * world)
            self.call("setup", "setup", [a.setup.remote(self.address, self.port, 2 * self.timeout_s, *slot)
                                         for a, slot in zip(self.actors, slots)])
        except BaseException:  # no worker outlives a failed start
            self.close()
            raise

    def call(self, role: str, method: str, refs: list) -> list:
        """The results of one call per rank (refs[i] is rank i's), in rank order. Waits at most
        trainer.worker_timeout_s in all; the first failure stops the run, naming the rank that caused it."""
        import ray

        self.wait(role, method, refs)
        return ray.get(refs)

    def wait(self, role: str, method: str, refs: list) -> None:
        """`call` without fetching the results (they may stay in the object store, e.g. weights another pool
        reads)."""
        import ray

        deadline = time.monotonic() + self.timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise self._timeout(role, method, [refs.index(r) for r in pending])
            if failure_of(ready[0]) is not None:
                raise self._failure(role, method, refs)

    def _failure(self, role: str, method: str, refs: list) -> WorkerError:
        """The culprit among the ranks that failed: a rank whose process died comes first (its peers then
        fail in a collective, at about the same moment), then a rank that raised a user error or anything
        else, and a collective failure last. The others get FAILURE_GRACE_S to show what happened to them."""
        import ray

        self.failed = True
        ray.wait(refs, num_returns=len(refs), timeout=FAILURE_GRACE_S)
        failures = {rank: f for rank, f in enumerate(failure_of(r) for r in refs) if f is not None}
        rank = min(failures, key=lambda r: (blame_order(failures[r]), r))
        e, others = failures[rank], sorted(set(failures) - {rank})
        also = f" (rank(s) {others} failed after it)" if others else ""
        where = f"rank {rank} of {self.world}{self._where()}"
        if died(e):
            return WorkerError(f"{role}.{method}: the worker of {where} died ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:300]}){also}; the run stops, resume it from the last "
                               f"checkpoint (what it printed: {self.logs[rank]})")
        cause = getattr(e, "cause", None)
        if isinstance(cause, HybridRLError):  # a user error raised in a worker: its one line, no worker traceback
            return WorkerError(f"{role}.{method} on {where}: {cause}")
        return WorkerError(f"{role}.{method} raised on {where}{also} (what it printed: {self.logs[rank]}):\n{e}")

    def call_all(self, role: str, method: str, call: Callable, *args) -> list:
        """`call(actor).remote(*args)` on every rank; results in rank order."""
        return self.call(role, method, [call(a).remote(*args) for a in self.actors])

    def update(self, role: str, call: Callable, batch, mini_per_worker: int, balance: bool = False) -> dict[str, float]:
        """One training update on every rank: `call(actor)` is its remote update method, rank r gets its
        share of every mini-batch (update_rows; `balance`: equal row counts with balanced tokens); the
        ranks' metrics are already reduced: rank 0's."""
        lengths = _lengths(batch) if balance else None
        rows = update_rows(num_rows(batch), self.world, mini_per_worker, lengths)
        return self.call(role, "update", [call(a).remote(select(batch, r)) for a, r in zip(self.actors, rows)])[0]

    def map_rows(self, role: str, method: str, call: Callable, batch, balance: bool = False) -> Tensor:
        """`call(actor)` is a worker's remote method returning a [rows, ...] tensor; rank r gets its
        consecutive rows of `batch` (`balance`: row counts within one, balanced by tokens); the results
        concatenated in the batch's row order."""
        n = num_rows(batch)
        shards = balanced_shards(_lengths(batch), self.world) if balance else shard_rows(n, self.world)
        out = torch.cat(self.call(role, method, [call(a).remote(select(batch, r)) for a, r in zip(self.actors, shards)]))
        return out if not balance else out[torch.argsort(torch.cat(shards))]

    def timeline_events(self) -> list[dict]:
        """The spans every rank recorded since the last call (trainer.profile_timeline)."""
        return [e for events in self.call_all(self.name, "timeline_events", lambda a: a.timeline_events) for e in events]

    def _where(self) -> str:
        return "" if self.name == "actor" else f" of the {self.name} pool"

    def _timeout(self, role: str, method: str, stuck: list[int]) -> WorkerError:
        """The stuck ranks with their Python stacks, asked of all at once and waited for STACKS_WAIT_S in
        all: a rank that cannot answer (stopped, frozen) is named as the likely cause, not waited on."""
        import ray

        self.failed = True
        asked = {rank: self.actors[rank].stacks.remote() for rank in stuck[:4]}  # several: peers wait for the culprit
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=STACKS_WAIT_S)
        stacks, silent = [], []
        for rank, ref in asked.items():
            try:
                stack = ray.get(ref, timeout=0) if ref in ready else None
            except Exception as e:  # noqa: BLE001  the worker died meanwhile: say so
                stack = f"(no stack: {type(e).__name__})"
            if stack is None:
                silent.append(rank)
                self.silent.add(rank)
                stack = f"(no answer within {STACKS_WAIT_S:g}s: the process is stopped, frozen or out of memory)"
            stacks.append(f"--- stack of rank {rank} ---\n{stack}")
        culprit = (f"; rank(s) {silent} do not respond at all: the likely cause" if silent and len(silent) < len(asked)
                   else "")
        return WorkerError(f"{role}.{method} did not finish on rank(s) {stuck} of {self.world}{self._where()} within "
                           f"trainer.worker_timeout_s={self.timeout_s:g}s{culprit}; the run stops (raise the timeout "
                           "if the step is just slow; a rank waiting in a collective waits for another one; what the "
                           f"ranks printed: {os.path.dirname(self.logs[0])})\n"
                           + "\n".join(stacks))

    def close(self) -> None:
        """Each worker first ends its engines (vLLM's processes, its scratch folders in /dev/shm), for at most
        CLOSE_WAIT_S (FAILED_CLOSE_WAIT_S after a failure), then Ray ends the processes. A rank that already
        answered nothing past a deadline (stopped, frozen) is killed first and not asked: waiting CLOSE_WAIT_S on
        it kept the driver alive 30 s after its error. Its peers, even those stuck in a collective with it,
        answer close() on their second thread."""
        import ray

        here = ray.get_runtime_context().get_node_id()
        for rank in sorted(self.silent):
            # Ray ends a stopped process only after its own grace period: one on this node gets SIGKILL now
            if rank < len(getattr(self, "node_ids", [])) and self.node_ids[rank] == here:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pids[rank], signal.SIGKILL)
            ray.kill(self.actors[rank])
        healthy = [a for rank, a in enumerate(self.actors) if rank not in self.silent]
        ray.wait([a.close.remote() for a in healthy], num_returns=len(healthy),
                 timeout=FAILED_CLOSE_WAIT_S if self.failed else CLOSE_WAIT_S)
        for actor in healthy:
            ray.kill(actor)
        # ray.kill only asks: a worker still running after the driver exits holds its cores and memory
        end_processes(getattr(self, "local_processes", {}), EXIT_WAIT_S)
        self.actors = []
        self.layout.remove()


class RayRoles:
    def __init__(self, cfg: RLConfig, plan: BatchPlan, total_steps: int, pad_id: int, log=print,
                 worker_cls=RoleWorker):
        import ray

        adopt_logger("ray")  # Ray's notes (token auth, ...) to the run's driver.log; its errors still on the console
        self.pad_id = pad_id  # re-pads the gathered rollouts
        init = cfg.ray_kwargs.ray_init
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            # workers' output goes to their files in the run folder (WorkerPool), not streamed to this console
            init_ray(init.address, num_cpus=init.num_cpus if init.address is None else None, log_to_driver=False)
        sizes, roles = pool_sizes(cfg), pool_roles(cfg)
        workers = sum(sizes.values())
        cpus = worker_cpus()  # a sweep trial's: its placement group's (distributed/placement_group.py)
        gpus = int(ray.cluster_resources().get("GPU", 0)) if cfg.trainer.device == "cuda" else workers
        if cpus < workers or gpus < workers:  # Ray would keep the workers pending forever: say so now
            self.close()
            what = f"{cpus} CPUs" if cpus < workers else f"{gpus} GPUs (trainer.device=cuda: one per worker)"
            raise ConfigError(f"{_pools_text(sizes)} = {workers} workers need {workers} "
                              f"{'CPUs' if cpus < workers else 'GPUs'}, the Ray cluster has {what}; lower "
                              "trainer.n_gpus_per_node (or a pool's size), or raise ray_kwargs.ray_init.num_cpus / "
                              "add nodes")
        threads = max(1, cpus // workers)
        self.pools: dict[str, WorkerPool] = {}
        try:
            for name, size in sizes.items():
                cls, concurrency = rollout_pool_worker(cfg) if name == "rollout" else (worker_cls, 2)
                # the rollout pool starts last (pool_sizes): its engines take the cores after every other pool's
                taken = Counter(n for p in self.pools.values() for n in p.node_ids) if name == "rollout" else None
                self.pools[name] = WorkerPool(name, roles[name], size, cfg, plan, total_steps, threads, cls,
                                              concurrency, taken)
            self.placement_group = driver_placement_group()
            for name, p in self.pools.items():  # a pool over several nodes is in its own group, inside none
                check_same_group(p.layout.expected(self.placement_group), {name: p.placement_groups})
        except BaseException:  # no worker outlives a failed start
            self.close()
            raise
        actor = self.pools["actor"]
        self.world = actor.world
        nodes = {n for p in self.pools.values() for n in p.node_ids}
        log(f"backend=ray: {_pools_text(sizes)} ({threads} torch threads each) on {len(nodes)} node(s), "
            f"process group at {actor.address}:{actor.port}"
            f"{f', all in placement group {self.placement_group}' if self.placement_group else ''}; workers' output in "
            f"{logs_dir(cfg.trainer.default_local_dir)}")
        self.policy = PolicyGroup(actor, pad_id, plan.mini_batch_responses_per_worker,
                                  actor_update_batching(cfg, 1).dynamic, log_prob_batching(cfg).dynamic,
                                  cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
        self.reference = ReferenceGroup(actor, ref_batching(cfg).dynamic) if needs_reference(cfg) else None
        self.teacher = (TeacherGroup(self.pools.get("teacher", actor), ref_batching(cfg).dynamic)
                        if needs_teacher(cfg) else None)
        self.critic = (CriticGroup(self.pools.get("critic", actor), critic_batch_plan(cfg).mini_batch_responses_per_worker,
                                   critic_update_batching(cfg, 1).dynamic, critic_values_batching(cfg).dynamic)
                       if needs_critic(cfg) else None)
        self.reward_model = RewardModelGroup(self.pools["reward_model"]) if "reward_model" in self.pools else None
        self.rollout = RolloutGroup(self.pools["rollout"], pad_id) if "rollout" in self.pools else None  # async

    def timeline_events(self) -> list[dict]:
        """The new spans of every worker of every pool (trainer.profile_timeline; hybridrl/timeline.py)."""
        return [e for pool in self.pools.values() for e in pool.timeline_events()]

    def nodes(self, pool: str = "actor") -> list[str]:
        """The Ray node id of each rank of a pool."""
        return list(self.pools[pool].node_ids)

    def close(self) -> None:
        import ray

        for pool in getattr(self, "pools", {}).values():
            pool.close()
        self.pools = {}
        if self._started_ray and ray.is_initialized():
            ray.shutdown()


def _pools_text(sizes: dict[str, int]) -> str:
    return " + ".join(f"{n} {name} worker(s)" for name, n in sizes.items())


def _lengths(batch) -> list[int]:
    """Real tokens of each row (prompt + response) of a Sequences or a batch holding one in `seqs`."""
    seqs = batch if isinstance(batch, Sequences) else batch.seqs
    return seqs.attention_mask.sum(-1).tolist()


def update_rows(n: int, world: int, mini_per_worker: int, lengths: list[int] | None = None) -> list[torch.Tensor]:
    """Rank r's rows of an n-row training batch: its 1/world share of every mini-batch, so that
    mini-batch j over all ranks holds the rows mini-batch j holds in one process (n is a whole
    number of mini-batches: the batch plan checks it). The share is a consecutive slice, or with
    `lengths` (token counts per row) the rows balanced by tokens (batching.balanced_shards), for
    token-budget micro-batches. Without actor.shuffle the updates are then those of one process."""
    size = mini_per_worker * world
    if n % size:
        raise HybridRLError(f"{n} rows are not whole mini-batches of {size} (the batch plan should have refused this)")
    if lengths is None:
        return [torch.cat([torch.arange(j + r * mini_per_worker, j + (r + 1) * mini_per_worker) for j in range(0, n, size)])
                for r in range(world)]
    shards = [balanced_shards(lengths[j:j + size], world) for j in range(0, n, size)]
    return [torch.cat([j * size + s[r] for j, s in enumerate(shards)]) for r in range(world)]


class PolicyGroup:
    """The policy of every rank, with the local Policy's methods. State calls go to every rank: under
    fsdp2 gathering the whole weights is a collective; rank 0's answer speaks for all."""

    def __init__(self, pool: WorkerPool, pad_id: int, mini_per_worker: int, balance_update: bool = False,
                 balance_log_probs: bool = False, rollout_tp: int = 1):
        self.pool, self.pad_id, self.mini_per_worker = pool, pad_id, mini_per_worker
        self.layout = RolloutLayout(pool.world, rollout_tp)
        self.balance_update, self.balance_log_probs = balance_update, balance_log_probs  # token-budget passes

    def generate(self, prompts: PromptBatch, n: int, sampling: SamplingParams, stream: str = "train",
                 sample_ids: Optional[Tensor] = None) -> Rollout:
        """Each engine's consecutive share of the prompts (rollout/tp_layout.py): every rank of an engine generates
        it (one engine per rank unless rollout TP > 1); the engines' leaders' responses, in prompt order.
        `sample_ids` ([N*n]): see rollout/base.generate_rollout; each shard takes its rows'."""
        layout = self.layout
        shards = layout.per_rank(shard_rows(len(prompts.index), layout.num_engines))
        ids = None if sample_ids is None else sample_ids.view(len(prompts.index), n)
        refs = [a.generate.remote(select(prompts, rows) if len(rows) else None, n, sampling, stream,
                                  None if ids is None or not len(rows) else ids[rows].reshape(-1))
                for a, rows in zip(self.pool.actors, shards)]
        parts = [p for p in layout.leaders_only(self.pool.call("policy", "generate", refs)) if p is not None]
        return concat_rollouts(parts, self.pad_id)

    def skip(self, stream: str = "train") -> None:
        """Count a generate call on every rank without generating (Policy.skip): the agent source keeps the
        built-in multi-turn rollout's call numbering."""
        self.pool.call("policy", "generate", [a.generate.remote(None, 1, None, stream) for a in self.pool.actors])

    def log_probs(self, seqs: Sequences) -> Tensor:
        return self.pool.map_rows("policy", "log_probs", lambda a: a.policy_log_probs, seqs, self.balance_log_probs)

    def log_probs_and_entropy(self, seqs: Sequences) -> tuple[Tensor, Tensor]:
        both = self.pool.map_rows("policy", "log_probs_and_entropy", lambda a: a.policy_log_probs_and_entropy, seqs,
                                  self.balance_log_probs)  # [N, 2, T]
        return both[:, 0], both[:, 1]

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self.pool.update("policy", lambda a: a.policy_update, batch, self.mini_per_worker, self.balance_update)

    def engine_weights(self):
        """An object-store reference to the whole current weights (rank 0's; every rank joins the gather), for the
        async rollout pool to read directly: the driver never holds a copy."""
        refs = [a.policy_engine_weights.remote() for a in self.pool.actors]
        self.pool.wait("policy", "engine_weights", refs)
        return refs[0]

    def model_shape(self) -> ModelShape:
        return self.pool.call("policy", "model_shape", [self.pool.actors[0].model_shape.remote()])[0]

    def saved_shapes(self) -> dict[str, tuple[int, ...]]:  # global shapes: rank 0 speaks for all
        return self.pool.call("policy", "saved_shapes", [self.pool.actors[0].policy_saved_shapes.remote()])[0]

    def state_dict(self) -> dict:
        return self.pool.call_all("policy", "state_dict", lambda a: a.policy_state)[0]

    def load_state_dict(self, state: dict) -> None:
        self.pool.call_all("policy", "load_state_dict", lambda a: a.policy_load_state, state)

    def save_pretrained(self, folder: str) -> None:  # rank 0 writes
        self.pool.call_all("policy", "save_pretrained", lambda a: a.policy_save, folder)

    def load_pretrained(self, folder: str) -> None:  # every rank reads the folder (a shared filesystem)
        self.pool.call_all("policy", "load_pretrained", lambda a: a.policy_load, folder)

    def close(self) -> None:
        """Nothing of its own to end: the worker processes and their engines belong to RayRoles, whose close()
        ends them all (RLRun.close); a policy's close is part of its role (workers/roles.PolicyRole)."""


class ReferenceGroup:
    def __init__(self, pool: WorkerPool, balance: bool = False):
        self.pool, self.balance = pool, balance

    def log_probs(self, seqs: Sequences) -> Tensor:
        return self.pool.map_rows("reference", "log_probs", lambda a: a.reference_log_probs, seqs, self.balance)


class TeacherGroup:
    """The distillation teacher: rank r in actor worker r beside the reference (its batching keys), or in its own
    pool (distillation.enable_resource_pool)."""

    def __init__(self, pool: WorkerPool, balance: bool = False):
        self.pool, self.balance = pool, balance

    def log_probs(self, seqs: Sequences) -> Tensor:
        return self.pool.map_rows("teacher", "log_probs", lambda a: a.teacher_log_probs, seqs, self.balance)


class CriticGroup:
    """The critic of every rank of its pool (the actor pool, or its own: plan/roles.py critic_pool_workers)."""

    def __init__(self, pool: WorkerPool, mini_per_worker: int, balance_update: bool = False, balance_values: bool = False):
        self.pool, self.mini_per_worker = pool, mini_per_worker
        self.balance_update, self.balance_values = balance_update, balance_values  # token-budget passes

    def values(self, seqs: Sequences) -> Tensor:
        return self.pool.map_rows("critic", "values", lambda a: a.critic_values, seqs, self.balance_values)

    def update(self, batch: CriticBatch) -> dict[str, float]:
        return self.pool.update("critic", lambda a: a.critic_update, batch, self.mini_per_worker, self.balance_update)

    def state_dict(self) -> dict:
        return self.pool.call_all("critic", "state_dict", lambda a: a.critic_state)[0]

    def load_state_dict(self, state: dict) -> None:
        self.pool.call_all("critic", "load_state_dict", lambda a: a.critic_load_state, state)

    def save_pretrained(self, folder: str) -> None:
        self.pool.call_all("critic", "save_pretrained", lambda a: a.critic_save, folder)

    def load_pretrained(self, folder: str) -> None:
        self.pool.call_all("critic", "load_pretrained", lambda a: a.critic_load, folder)

    def saved_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.pool.call("critic", "saved_shapes", [self.pool.actors[0].critic_saved_shapes.remote()])[0]


class RewardModelGroup:
    """The reward model in its own pool (reward_model.enable_resource_pool), with RewardModel's method."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool

    def scores(self, rollout: Rollout, texts: list[str]) -> Tensor:
        shards = shard_rows(num_rows(rollout), self.pool.world)
        refs = [a.reward_scores.remote(select(rollout, rows), [texts[i] for i in rows.tolist()])
                for a, rows in zip(self.pool.actors, shards)]
        return torch.cat(self.pool.call("reward_model", "scores", refs))
