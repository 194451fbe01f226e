"""The critic role (PPO with GAE): value predictions and the clipped value-loss update."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.algos.reduce import reduce_loss
from hybridrl.algos.value_loss import clipped_value_loss
from hybridrl.batch import Sequences, to_device
from hybridrl.plan.levers import MicroBatching
from hybridrl.models.forward import PLAIN, Layout, batched_values, response_values
from hybridrl.models.lora import CRITIC_KEY
from hybridrl.parallel.sharding import Replicated, Sharding
from hybridrl.workers.update_loop import UpdatingWorker, clip_and_step, micro_batch_rows_of


@dataclass(frozen=True)
class CriticSettings:
    mini_batch_size: int  # responses per optimizer step on this worker
    micro_batch_size: int  # responses per forward/backward
    forward_micro_batch_size: int  # responses per no-grad value forward
    ppo_epochs: int
    shuffle: bool
    cliprange_value: float
    loss_agg_mode: str  # LOSS_AGG_MODES name
    grad_clip: float
    layout: Layout = PLAIN  # packing (critic.model.use_remove_padding); the critic runs each row's prompt itself
    max_tokens: int | None = None  # use_dynamic_bsz: update micro-batches of at most this many tokens
    forward_max_tokens: int | None = None  # ... and value forwards


@dataclass
class CriticBatch:
    seqs: Sequences  # [N, P+T]
    values: Tensor  # [N, T] V at rollout time (the clip's anchor), 0 on padding
    returns: Tensor  # [N, T] regression targets (GAE's A + V), 0 on padding


class Critic(UpdatingWorker[CriticBatch]):
    """V(s_t) of every response token: a full value model, or with critic.model.lora_rank > 0 a frozen
    base with LoRA adapters and a trained head (models/lora.py); checkpoints and resume as the policy's."""

    model_key = CRITIC_KEY

    def __init__(self, module, optimizer, scheduler, settings: CriticSettings, seed: int = 0,
                 sharding: Sharding | None = None):
        self.module, self.optimizer, self.scheduler, self.settings = module, optimizer, scheduler, settings
        self.sharding = sharding or Replicated()
        self.shuffle_generator = torch.Generator().manual_seed(seed)

    def values(self, seqs: Sequences) -> Tensor:
        """[N, T] V(s_t) under the current weights, without gradients."""
        s = self.settings
        batching = MicroBatching(s.forward_micro_batch_size, s.forward_max_tokens)
        self.module.eval()
        with self.sharding.gathered(self.module), self.precision.autocast():
            return batched_values(self.module, to_device(seqs, self.device),
                                  lambda part: micro_batch_rows_of(part, batching, False), s.layout).cpu()

    def _optimizer_step(self, mini: CriticBatch) -> dict[str, float]:
        s = self.settings
        # whole mini-batch over every rank: micro-batching and sharding leave the gradient exact
        scale = self.dp.loss_scale(mini.seqs.response_mask)
        self.optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = defaultdict(float)

        def micro_loss(micro: CriticBatch) -> Tensor:
            mask = micro.seqs.response_mask
            with self.precision.autocast():
                vpreds = response_values(self.module, micro.seqs, s.layout)
            out = clipped_value_loss(vpreds, micro.values, micro.returns, s.cliprange_value)
            loss = reduce_loss(out.loss, mask, s.loss_agg_mode, scale)
            stats["critic/vf_loss"] += loss.item()
            stats["critic/vf_clipfrac"] += reduce_loss(out.clipped, mask, "token-mean", scale).item()
            stats["critic/vpred_mean"] += reduce_loss(vpreds.detach(), mask, "token-mean", scale).item()
            return loss

        self._backward_all(self._micro_batches(mini, MicroBatching(s.micro_batch_size, s.max_tokens), False), micro_loss)
        stats = self.dp.reduce_stats(dict(stats))
        stats["critic/grad_norm"] = clip_and_step(self.module.parameters(), self.optimizer, s.grad_clip)
        stats["critic/lr"] = self.optimizer.param_groups[0]["lr"]
        return stats
