"""The policy of the twin run and a batch of its own rollouts on real prompts, built as `train` builds them
(workers/build.py, data/dataset.py, rollout/): what the sampling and update checks measure on.

The twin's random weights give a nearly uniform next-token distribution (logits ~0.2 apart over the whole
vocabulary), on which temperature and top-p barely move a log-prob. `sharpen` rescales the twin's final
norm so that its distributions have the entropy of a trained model's, where the sampling settings matter.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch
from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.rollout.base import SamplingParams

TARGET_ENTROPY = 2.5  # nats: a trained chat model's typical next-token entropy at temperature 1
PROMPTS = 4  # at most this many real prompts per measured batch


def twin_cfg(ctx, name: str, **changes) -> tuple[RLConfig, BatchPlan]:
    """The twin run's (config, batch plan) with its run folder under the check's scratch folder."""
    run_plan = ctx.run_config(os.path.join(ctx.work_dir, name), 1, **changes)
    return run_plan.config, run_plan.batch


def build_twin_policy(cfg: RLConfig, plan: BatchPlan, dp=None):
    """(policy, tokenizer) exactly as the run builds them (one worker unless `dp`)."""
    from hybridrl.parallel.dp import SINGLE
    from hybridrl.models.loading import load_tokenizer
    from hybridrl.workers.build import build_policy

    tokenizer = load_tokenizer(cfg.actor_rollout_ref.model.path)
    return build_policy(cfg, plan, tokenizer, total=1, dp=dp or SINGLE), tokenizer


def real_prompts(cfg: RLConfig, tokenizer, count: int = PROMPTS) -> PromptBatch:
    """The first `count` prompts of data.train_files, tokenized and truncated as the run does."""
    from hybridrl.config.validate import needs_ground_truth
    from hybridrl.data.dataset import RLDataset

    d = cfg.data
    data = RLDataset(d.train_files, tokenizer, d.prompt_key, d.max_prompt_length, d.truncation,
                     d.filter_overlong_prompts, "data.train_files", count, d.reward_fn_key, d.skip_bad_rows,
                     needs_ground_truth(cfg))
    return data.collate(list(range(min(count, len(data)))), tokenizer.pad_token_id)


def run_sampling(cfg: RLConfig) -> SamplingParams:
    """The training rollouts' sampling parameters, as trainer/build.py sets them."""
    r = cfg.actor_rollout_ref.rollout
    return SamplingParams(cfg.data.max_response_length, r.temperature, r.top_p, r.top_k, r.do_sample, r.ignore_eos)


def final_norm(module) -> Optional[torch.nn.Module]:
    """The norm right before the LM head (model.norm, transformer.ln_f, ...): the last norm module whose name has
    no layer index; None if the architecture has none."""
    from hybridrl.rollout.decode import unwrapped

    found = [m for name, m in unwrapped(module).named_modules()
             if name and not any(p.isdigit() for p in name.split(".")) and "norm" in type(m).__name__.lower()
             and isinstance(getattr(m, "weight", None), torch.Tensor)]
    return found[-1] if found else None


@torch.no_grad()
def last_logits(module, prompts: PromptBatch) -> Tensor:
    """[B, V] fp32 next-token logits after each prompt."""
    from hybridrl.models.forward import position_ids_of

    out = module(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                 position_ids=position_ids_of(prompts.attention_mask), logits_to_keep=1)
    return out.logits[:, -1].float()


def entropy(logits: Tensor) -> float:
    """Mean entropy (nats) of softmax(logits [B, V])."""
    logp = torch.log_softmax(logits, -1)
    return float(-(logp.exp() * logp).sum(-1).mean())


@torch.no_grad()
def sharpen(policy, prompts: PromptBatch, target: float = TARGET_ENTROPY) -> str:
    """Scale the twin's final-norm weight so that its next-token entropy after `prompts` is about `target`
    (logits are linear in that weight for RMSNorm/LayerNorm + an LM head without bias: bisect the scale on
    the measured logits, then apply it). An engine with its own copy (vllm) gets the new weights. Returns
    a line saying what was done, for the report."""
    norm = final_norm(policy.module)
    before = last_logits(policy.module, prompts)
    if norm is None:
        return f"twin not sharpened (no final norm found): next-token entropy {entropy(before):.2f} nats"
    lo, hi = 0.0, 8.0  # log of the scale
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if entropy(before * math.exp(mid)) > target else (lo, mid)
    norm.weight.mul_(math.exp(lo))
    if not policy.engine.shares_weights:
        policy.sync_engine()
    after = entropy(last_logits(policy.module, prompts))
    return (f"twin sharpened (final norm x{math.exp(lo):.1f}): next-token entropy {entropy(before):.2f} -> "
            f"{after:.2f} nats, so temperature and top-p/top-k change the distribution measurably")


def twin_rollout(policy, prompts: PromptBatch, cfg: RLConfig) -> Rollout:
    """rollout.n responses per prompt, sampled by the run's engine with the run's sampling parameters."""
    return policy.generate(prompts, cfg.actor_rollout_ref.rollout.n, run_sampling(cfg))
