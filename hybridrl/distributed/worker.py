"""One worker process of `trainer.backend=ray`: data-parallel rank r of the roles of its pool.

The hybrid engine: in the actor pool the policy (with its rollout engine: hf samples with the
policy's own module, so no weight copy is needed; vllm is an engine per worker, or one over
tensor_model_parallel_size workers, synced after every update), and the reference and critic when the algorithm
uses them, live in one process per rank. A critic or reward-model pool hosts just that role. The
driver reaches them only through the typed methods below (distributed/group.py wraps them per
role); only `node_id` asks Ray anything. With trainer.profile_timeline each call of a `@recorded`
method is a span on this process's track of the timeline (hybridrl/timeline.py).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback
from typing import Optional

import torch
from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout, Sequences, TrainBatch
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.distributed.address import bind_gloo_to_node, meeting_address
from hybridrl.models.flops import ModelShape
from hybridrl.parallel.dp import SINGLE, init_data_parallel
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.tp_layout import RolloutLayout, RolloutSeat, check_within_nodes, local_rank, rank_cores
from hybridrl.timeline import TimelineWorker, recorded
from hybridrl.workers.build import build_critic, build_policy, build_reference, build_reward_model, build_teacher
from hybridrl.workers.critic import CriticBatch


class Diagnosable:
    """What the driver asks of any worker process beside its work: where it runs, what it is doing, where its
    output goes."""

    def send_output_to(self, path: str) -> None:
        """This process's output (and its engines') into its log file from now on: the driver does not stream
        workers' output to the console (hybridrl/library_logs.py)."""
        from hybridrl.library_logs import send_process_output_to

        send_process_output_to(path)

    def pid(self) -> int:
        """This worker's process id on its node (a stopped worker is killed by it: WorkerPool.close)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this rank runs on (for the placement report)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def placement_group_id(self) -> str | None:
        """The placement group this rank runs in (a sweep trial's: distributed/placement_group.py), or None."""
        import ray

        return ray.get_runtime_context().get_placement_group_id()

    def stacks(self) -> str:
        """Every thread's Python stack: what a stuck call is doing (runs beside it: max_concurrency >= 2)."""
        names = {t.ident: t.name for t in threading.enumerate()}
        me = threading.get_ident()
        parts = [f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
                 for ident, frame in sys._current_frames().items() if ident != me]
        return "\n".join(parts)


class RoleWorker(Diagnosable, TimelineWorker):
    def __init__(self, cfg: RLConfig, plan: BatchPlan, total_steps: int, rank: int, world_size: int, threads: int,
                 roles: tuple[str, ...] = ("policy",)):
        torch.set_num_threads(threads)
        self.cfg, self.plan, self.total_steps = cfg, plan, total_steps
        self.rank, self.world_size, self.roles, self.threads = rank, world_size, roles, threads
        self.policy = self.reference = self.teacher = self.critic = self.reward_model = None

    def rendezvous(self, spans_nodes: bool = False) -> tuple[str, int]:
        """This node's address (its Ray address when the pool `spans_nodes`: address.py) and a free port on it, for
        rank 0 to host the process group."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return meeting_address(spans_nodes), port

    @recorded
    def setup(self, address: str, port: int, timeout_s: float) -> None:
        """Join the pool's process group (every rank at once), then build its roles."""
        from hybridrl.models.loading import load_tokenizer

        cfg = self.cfg
        # on GPU: gloo carries the CPU tensors (token counts, metrics), NCCL the CUDA ones (gradients)
        backend = "cpu:gloo,cuda:nccl" if cfg.trainer.device == "cuda" else "gloo"
        bind_gloo_to_node(address)  # across nodes: gloo's sockets on the node's own interface
        dp = (init_data_parallel(self.rank, self.world_size, address, port, timeout_s, backend)
              if self.world_size > 1 else SINGLE)
        tokenizer = load_tokenizer(cfg.actor_rollout_ref.model.path)
        if "policy" in self.roles:
            self.policy = build_policy(cfg, self.plan, tokenizer, self.total_steps, dp, self._rollout_seat())
        if "reference" in self.roles:
            self.reference = build_reference(cfg, self.policy)  # LoRA: the policy's module, adapter off
        if "teacher" in self.roles:
            self.teacher = build_teacher(cfg, tokenizer)
        if "critic" in self.roles:
            self.critic = build_critic(cfg, self.total_steps, dp)
        if "reward_model" in self.roles:
            self.reward_model = build_reward_model(cfg, tokenizer)

    def _rollout_seat(self) -> RolloutSeat:
        """This rank's place among the pool's rollout engines (rollout/tp_layout.py): its rank on its node (every
        rank tells the others its node: a collective) and its share of the node's cores for the engine's threads."""
        if self.world_size == 1:
            return RolloutSeat(0, 0, rank_cores(0, self.threads, sorted(os.sched_getaffinity(0))))
        import torch.distributed as dist

        nodes: list = [None] * self.world_size
        dist.all_gather_object(nodes, self.node_id())
        tp = self.cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
        check_within_nodes(RolloutLayout(self.world_size, tp), nodes)
        local = local_rank(self.rank, nodes)
        return RolloutSeat(self.rank, local, rank_cores(local, self.threads, sorted(os.sched_getaffinity(0))))

    def close(self) -> None:
        """End the roles' engines (vLLM's processes and scratch folders) before Ray ends this process."""
        if self.policy is not None:
            self.policy.close()

    # policy ---------------------------------------------------------------------------------
    @recorded
    def generate(self, prompts: Optional[PromptBatch], n: int, sampling: SamplingParams,
                 stream: str, sample_ids: Optional[Tensor] = None) -> Optional[Rollout]:
        """n responses per prompt; None for an empty shard, which still counts the generate call (and
        joins the weight gather of fsdp2) so every rank's sampling counters stay equal (rollout/keyed.py)."""
        if prompts is None:
            self.policy.skip(stream)
            return None
        return self.policy.generate(prompts, n, sampling, stream, sample_ids)

    @recorded
    def policy_log_probs(self, seqs: Sequences) -> Tensor:
        return self.policy.log_probs(seqs)

    @recorded
    def policy_log_probs_and_entropy(self, seqs: Sequences) -> Tensor:
        return self.policy.log_probs_and_entropy_stacked(seqs)  # [rows, 2, T]

    @recorded
    def policy_update(self, batch: TrainBatch) -> dict[str, float]:
        return self.policy.update(batch)

    @recorded
    def policy_state(self) -> dict:
        return self.policy.state_dict()

    @recorded
    def policy_load_state(self, state: dict) -> None:
        self.policy.load_state_dict(state)

    @recorded
    def policy_save(self, folder: str) -> None:
        self.policy.save_pretrained(folder)

    @recorded
    def policy_load(self, folder: str) -> None:
        self.policy.load_pretrained(folder)

    def model_shape(self) -> ModelShape:
        return self.policy.model_shape()

    def policy_saved_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.policy.saved_shapes()

    def policy_engine_weights(self) -> Optional[dict]:
        """The whole weights for the async rollout pool (every rank joins the fsdp2 gather); rank 0's answer only,
        so the object store holds one copy."""
        weights = self.policy.engine_weights()
        return weights if self.rank == 0 else None

    # reference ------------------------------------------------------------------------------
    @recorded
    def reference_log_probs(self, seqs: Sequences) -> Tensor:
        return self.reference.log_probs(seqs)

    # teacher (distillation) -------------------------------------------------------------------
    @recorded
    def teacher_log_probs(self, seqs: Sequences) -> Tensor:
        return self.teacher.log_probs(seqs)

    # critic ---------------------------------------------------------------------------------
    @recorded
    def critic_values(self, seqs: Sequences) -> Tensor:
        return self.critic.values(seqs)

    @recorded
    def critic_update(self, batch: CriticBatch) -> dict[str, float]:
        return self.critic.update(batch)

    @recorded
    def critic_state(self) -> dict:
        return self.critic.state_dict()

    @recorded
    def critic_load_state(self, state: dict) -> None:
        self.critic.load_state_dict(state)

    @recorded
    def critic_save(self, folder: str) -> None:
        self.critic.save_pretrained(folder)

    @recorded
    def critic_load(self, folder: str) -> None:
        self.critic.load_pretrained(folder)

    def critic_saved_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.critic.saved_shapes()

    # reward model -------------------------------------------------------------------------
    @recorded
    def reward_scores(self, rollout: Rollout, texts: list[str]) -> Tensor:
        return self.reward_model.scores(rollout, texts)
