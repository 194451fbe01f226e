"""The policy (actor) role: sample rollouts, recompute log-probs, and run the PPO-style update."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from hybridrl.algos.distill import distillation_loss, distillation_pg_loss
from hybridrl.algos.kl import kl_penalty
from hybridrl.algos.policy_losses import POLICY_LOSSES, PolicyLossParams
from hybridrl.algos.reduce import LossScale, reduce_loss
from hybridrl.algos.rollout_correction import rollout_is_weights
from hybridrl.algos.zero_advantage import rows_with_signal
from hybridrl.batch import PromptBatch, Rollout, Sequences, TrainBatch, select, to_device
from hybridrl.plan.levers import MicroBatching
from hybridrl.models.flops import ModelShape
from hybridrl.models.forward import PLAIN, Layout, batched_log_probs, batched_log_probs_and_entropy, response_log_probs
from hybridrl.models.lora import POLICY_KEY, plain_state_dict
from hybridrl.parallel.sharding import Replicated, Sharding
from hybridrl.rollout.base import RolloutEngine, SamplingParams, generate_rollout
from hybridrl.workers.update_loop import UpdatingWorker, clip_and_step, micro_batch_rows_of


@dataclass(frozen=True)
class UpdateSettings:
    mini_batch_size: int  # responses per optimizer step on this worker
    micro_batch_size: int  # responses per forward/backward
    ppo_epochs: int
    shuffle: bool
    loss_mode: str  # POLICY_LOSSES name
    loss_params: PolicyLossParams
    loss_agg_mode: str  # LOSS_AGG_MODES name
    loss_scale_factor: float  # seq-mean-token-sum-norm's constant length
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    grad_clip: float
    temperature: float  # log-probs are taken at the rollout temperature, as sampled
    log_prob_micro_batch_size: int
    rollout_is: str | None = None  # ROLLOUT_IS level (token | sequence), None: no rollout correction
    rollout_is_threshold: float = 2.0
    layout: Layout = PLAIN  # how a micro-batch enters the model: prompt sharing, packing (models/forward.py)
    max_tokens: int | None = None  # use_dynamic_bsz: update micro-batches of at most this many tokens, not micro_batch_size
    log_prob_max_tokens: int | None = None  # log_prob_use_dynamic_bsz: the same for the log-prob pass
    skip_zero_advantage: bool = False  # leave zero-advantage rows out of the update (only set where exact)
    distill_loss_mode: str | None = None  # distillation.distillation_loss.loss_mode; None: no distillation loss
    distill_coef: float = 1.0  # distillation.distillation_loss.distillation_loss_coef
    distill_policy_gradient: bool = False  # distillation.distillation_loss.use_policy_gradient (algos/distill.py)

    @property
    def update_batching(self) -> MicroBatching:
        return MicroBatching(self.micro_batch_size, self.max_tokens)

    @property
    def log_prob_batching(self) -> MicroBatching:
        return MicroBatching(self.log_prob_micro_batch_size, self.log_prob_max_tokens)


class Policy(UpdatingWorker[TrainBatch]):
    model_key = POLICY_KEY

    def __init__(self, module, optimizer, scheduler, engine: RolloutEngine, settings: UpdateSettings, seed: int = 0,
                 sharding: Sharding | None = None):
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.engine, self.settings = engine, settings
        self.sharding = sharding or Replicated()
        self.shuffle_generator = torch.Generator().manual_seed(seed)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "engine": self.engine.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.engine.load_state_dict(state["engine"])

    def model_shape(self) -> ModelShape:
        return ModelShape.of(self.module)

    def _engine_view(self):
        """Whole weights for an engine that samples with the module itself (hf, under fsdp2); an engine
        with its own copy (vllm) needs none."""
        return self.sharding.gathered(self.module) if self.engine.shares_weights else contextlib.nullcontext()

    def engine_weights(self) -> dict[str, Tensor]:
        """The current whole weights as an engine with its own copy loads them (under fsdp2 a collective: every
        rank); with LoRA the merged base + adapter weights, under the base model's names."""
        return plain_state_dict(self.module, self.sharding.full_state_dict(self.module))

    def sync_engine(self) -> None:
        """The current weights into an engine with its own copy (vllm)."""
        self.engine.load_weights(self.engine_weights().items())

    def update(self, batch: TrainBatch) -> dict[str, float]:
        metrics = super().update(batch)
        if self.engine is not None and not self.engine.shares_weights:
            start = time.perf_counter()
            self.sync_engine()
            metrics["timing_s/update_weights"] = time.perf_counter() - start
        return metrics

    def load_pretrained(self, folder: str) -> None:
        """Weights of a checkpoint's actor/ folder: a HF folder, or with LoRA the adapter folder."""
        super().load_pretrained(folder)
        if not self.engine.shares_weights:  # a resumed run samples with the checkpoint's weights
            self.sync_engine()

    def close(self) -> None:
        self.engine.close()

    def generate(self, prompts: PromptBatch, n: int, sampling: SamplingParams, stream: str = "train",
                 sample_ids: Optional[Tensor] = None) -> Rollout:
        """n responses per prompt; `stream` "val" for validation, whose draws never move training's; `sample_ids`:
        see generate_rollout."""
        with self._engine_view():
            rollout = generate_rollout(self.engine, to_device(prompts, self.device), n, sampling, stream,
                                       sample_ids=sample_ids)
        return to_device(rollout, "cpu")

    def skip(self, stream: str = "train") -> None:
        """Count a generate call that has no prompts on this rank (an empty shard); it still joins
        the weight gather the other ranks run under fsdp2."""
        with self._engine_view():
            self.engine.skip(stream)

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π of each response token under the current weights, without gradients."""
        s = self.settings
        rows = lambda part: micro_batch_rows_of(part, s.log_prob_batching, s.layout.share_prompts)  # noqa: E731
        with self.sharding.gathered(self.module), self.precision.autocast():
            return batched_log_probs(self.module, to_device(seqs, self.device), s.temperature, rows, s.layout).cpu()

    def log_probs_and_entropy(self, seqs: Sequences) -> tuple[Tensor, Tensor]:
        """log_probs and, from the same forward, the entropy of π(.|s_t) at the rollout temperature: two
        [N, T] tensors, 0 on padding (trainer.dump_token_details)."""
        both = self.log_probs_and_entropy_stacked(seqs)
        return both[:, 0], both[:, 1]

    def log_probs_and_entropy_stacked(self, seqs: Sequences) -> Tensor:
        """[N, 2, T]: log-probs and entropies in one tensor, the form a Ray worker returns (its row shards concatenate)."""
        s = self.settings
        rows = lambda part: micro_batch_rows_of(part, s.log_prob_batching, s.layout.share_prompts)  # noqa: E731
        with self.sharding.gathered(self.module), self.precision.autocast():
            return batched_log_probs_and_entropy(self.module, to_device(seqs, self.device), s.temperature, rows,
                                                 s.layout).cpu()

    def _optimizer_step(self, mini: TrainBatch) -> dict[str, float]:
        # Normalize by the whole mini-batch (over every data-parallel rank) so accumulated
        # micro-batch gradients equal the full-batch gradient (algos/reduce.py, parallel/dp.py).
        s = self.settings
        scale = self.dp.loss_scale(mini.seqs.response_mask, s.loss_scale_factor)
        train, filler = mini, None
        if s.skip_zero_advantage:  # rows that add exactly 0 to loss and gradient (algos/zero_advantage.py)
            keep = rows_with_signal(mini.advantages, mini.seqs.response_mask)
            train, filler = select(mini, keep.nonzero()[:, 0]), select(mini, (~keep).nonzero()[:, 0])
        micros = self._micro_batches(train, s.update_batching, s.layout.share_prompts, filler)
        # the metrics (entropy, clip fraction, ...) are means over the rows computed, the loss over the whole mini-batch
        ran = self.dp.loss_scale(torch.cat([m.seqs.response_mask for m in micros]) if micros else
                                 mini.seqs.response_mask[:0], s.loss_scale_factor) if s.skip_zero_advantage else scale
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = defaultdict(float, dict.fromkeys(self._stat_keys(), 0.0))  # the same keys on every rank

        def micro_loss(micro: TrainBatch) -> Tensor:
            loss, micro_stats = self._micro_loss(micro, scale, ran if ran.num_seqs else scale)
            for key, value in micro_stats.items():
                stats[key] = max(stats[key], value) if key.endswith("_max") else stats[key] + value
            return loss

        self._backward_all(micros, micro_loss, fill_missing=s.skip_zero_advantage)
        if s.skip_zero_advantage and not ran.num_seqs:
            # No row of the mini-batch (on any rank) has a gradient: the update is AdamW's step on zeros. The
            # metrics come from a forward without gradients, as the full update would report them: a batch where
            # every group's rewards are equal is when entropy and the engine/trainer gap need watching (collapse).
            with torch.no_grad():
                for micro in self._micro_batches(mini, s.update_batching, s.layout.share_prompts):
                    micro_loss(micro)
        stats = self.dp.reduce_stats(dict(stats))
        if s.skip_zero_advantage:
            stats["actor/skipped_frac"] = 1.0 - ran.num_seqs / max(scale.num_seqs, 1.0)  # left out of the backward
        stats["actor/grad_norm"] = clip_and_step(self.module.parameters(), self.optimizer, self.settings.grad_clip)
        stats["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return stats

    def _stat_keys(self) -> list[str]:
        """The metrics _micro_loss returns under these settings."""
        s = self.settings
        return ["actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/entropy",
                "training/rollout_probs_diff_mean", "training/rollout_probs_diff_max", *(["actor/kl_loss"] if s.use_kl_loss else []),
                *(["actor/distill_loss"] if s.distill_loss_mode is not None else []),
                *(["rollout_corr/is_weight_mean", "rollout_corr/is_truncated_frac"] if s.rollout_is is not None else [])]

    def _micro_loss(self, micro: TrainBatch, scale: LossScale, ran: LossScale) -> tuple[Tensor, dict[str, float]]:
        """The micro-batch's share of the mini-batch loss (`scale`: the whole mini-batch), and its share of each
        metric (`ran`: the rows the update computes, fewer than the mini-batch's when zero-advantage rows are left out)."""
        s = self.settings
        mask = micro.seqs.response_mask
        with self.precision.autocast():  # the backward replays the forward's casts; the loss math below is fp32
            log_probs, entropy = response_log_probs(self.module, micro.seqs, s.temperature, with_entropy=True,
                                                     layout=s.layout)
        old = micro.old_log_probs if micro.old_log_probs is not None else log_probs.detach()
        out = POLICY_LOSSES.get(s.loss_mode)(log_probs, old, micro.advantages, mask, s.loss_params)
        token_loss, is_stats = out.loss, {}
        if s.rollout_is is not None:  # truncated importance weights for the engine/trainer gap
            weights, truncated = rollout_is_weights(old, micro.rollout_log_probs, mask, s.rollout_is,
                                                    s.rollout_is_threshold)
            token_loss = token_loss * weights
            is_stats = {"rollout_corr/is_weight_mean": reduce_loss(weights, mask, "token-mean", ran).item(),
                        "rollout_corr/is_truncated_frac": reduce_loss(truncated, mask, "token-mean", ran).item()}
        pg_loss = reduce_loss(token_loss, mask, s.loss_agg_mode, scale)
        loss = pg_loss
        if s.entropy_coeff:
            loss = loss - s.entropy_coeff * reduce_loss(entropy, mask, s.loss_agg_mode, scale)
        stats = {
            "actor/pg_loss": pg_loss.item(),
            "actor/pg_clipfrac": reduce_loss(out.clipped, mask, "token-mean", ran).item(),
            # the share of tokens where the dual clip (A < 0) bounded the loss; 0 for losses without one
            "actor/pg_clipfrac_lower": 0.0 if out.clipped_lower is None else
            reduce_loss(out.clipped_lower, mask, "token-mean", ran).item(),
            "actor/ppo_kl": reduce_loss(out.ppo_kl, mask, "token-mean", ran).item(),
            "actor/entropy": reduce_loss(entropy.detach(), mask, "token-mean", ran).item(),
        }
        if s.use_kl_loss:
            kl = reduce_loss(kl_penalty(log_probs, micro.ref_log_probs, s.kl_loss_type), mask, s.loss_agg_mode, scale)
            loss = loss + s.kl_loss_coef * kl
            stats["actor/kl_loss"] = kl.item()
        if s.distill_loss_mode is not None:  # on-policy distillation: KL(π || π_teacher) on the sampled tokens
            distill = (distillation_pg_loss(log_probs, old, micro.teacher_log_probs, mask, s.distill_loss_mode,
                                            s.loss_mode, s.loss_params, s.loss_agg_mode, scale)
                       if s.distill_policy_gradient else
                       distillation_loss(log_probs, micro.teacher_log_probs, mask, s.distill_loss_mode, s.loss_agg_mode,
                                         scale))
            loss = loss + s.distill_coef * distill
            stats["actor/distill_loss"] = distill.item()
        # How far the engine's sampling probabilities are from the trainer's π_old (verl's names).
        diff = (old.exp() - micro.rollout_log_probs.exp()).abs() * mask
        stats["training/rollout_probs_diff_mean"] = float(diff.sum() / max(ran.num_tokens, 1.0))
        stats["training/rollout_probs_diff_max"] = float(diff.max())
        return loss, {**stats, **is_stats}
