"""Reward-model training (`hybridrl rm`): the Bradley–Terry loss on preference pairs, mean over each batch.

The reward of a (prompt, response) is the score head at the sequence's last real token, read by
`workers/reward_model.last_token_scores`, the function the RL trainer's reward-model role scores
with: what is trained here is what an RL run with `reward_model.model.path=<default_local_dir>` reads.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
from omegaconf import OmegaConf
from torch import Tensor

from hybridrl import progress
from hybridrl.algos.bradley_terry import PairStats, pair_stats
from hybridrl.plan.batch_plan import total_training_steps
from hybridrl.config.rm import RMConfig, validate_rm_config
from hybridrl.plan.rm_memory import check_rm_memory, describe_rm_memory
from hybridrl.data.preference import (
    PreferenceBatch,
    PreferenceColumns,
    PreferenceDataset,
)
from hybridrl.data.sampler import PromptSampler
from hybridrl.errors import ConfigError
from hybridrl.interrupt import StoppedEarly, graceful
from hybridrl.models.loading import (
    load_tokenizer,
    quiet_loading,
    resolve_model_path,
    reward_model_to_train,
    weights_bytes,
)
from hybridrl.trainer.checkpoint import ResumePoint, check_output_dir, checkpoint_listing, find_resume_point
from hybridrl.trainer.rm_checkpoint import (
    check_same_config,
    restore_rm_checkpoint,
    save_rm_checkpoint,
)
from hybridrl.trainer.runlock import RunLock
from hybridrl.trainer.sft import save_final
from hybridrl.trainer.tracking import Tracker
from hybridrl.workers.optim import build_optimizer, warmup_steps_of
from hybridrl.workers.reward_model import last_token_scores


def pair_rewards(model, batch: PreferenceBatch) -> tuple[Tensor, Tensor]:
    """([B], [B]) rewards of the chosen and the rejected responses, from one forward over [2B, L]."""
    scores = last_token_scores(model, batch.input_ids, batch.attention_mask)  # [2B]
    return scores[:batch.num_pairs], scores[batch.num_pairs:]


def chunks(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def summarize(stats: list[PairStats], prefix: str) -> dict[str, float]:
    """`<prefix>/loss`, `/pair_accuracy` (share of pairs with r_chosen > r_rejected), `/margin_mean` (mean r_c - r_r)."""
    n = sum(s.count for s in stats)
    return {f"{prefix}/loss": sum(s.loss_sum.item() for s in stats) / n,
            f"{prefix}/pair_accuracy": sum(s.correct for s in stats) / n,
            f"{prefix}/margin_mean": sum(s.margin_sum for s in stats) / n}


@torch.no_grad()
def score_pairs(model, data: PreferenceDataset, micro: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """([N], [N]) rewards of every pair's chosen and rejected response, in the dataset's order."""
    parts = [pair_rewards(model, data.collate(c, pad_id)) for c in chunks(list(range(len(data))), micro)]
    return torch.cat([c for c, _ in parts]), torch.cat([r for _, r in parts])


def evaluate(model, data: PreferenceDataset, micro: int, pad_id: int, center: float) -> dict[str, float]:
    """Held-out `val/loss`, `val/pair_accuracy`, `val/margin_mean` over every pair of `data`."""
    r_c, r_r = score_pairs(model, data, micro, pad_id)
    margin = torch.tensor([p.margin for p in data.pairs])
    return summarize([pair_stats(r_c, r_r, margin, center)], "val")


@dataclass
class _Parts:
    """What the loop uses."""

    model: torch.nn.Module
    tokenizer: object
    train: PreferenceDataset
    val: PreferenceDataset | None
    sampler: PromptSampler
    optimizer: torch.optim.Optimizer
    scheduler: object
    tracker: Tracker
    total: int
    first: int  # the first step this run trains (> 1 after a resume)


def train_step(cfg: RMConfig, p: _Parts, indices: list[int]) -> dict[str, float]:
    """One optimizer step over a batch of pairs, in micro-batches whose gradients add up to the batch mean."""
    p.optimizer.zero_grad(set_to_none=True)
    stats = []
    for chunk in chunks(indices, cfg.data.micro_batch_size_per_gpu):
        batch = p.train.collate(chunk, p.tokenizer.pad_token_id)
        r_c, r_r = pair_rewards(p.model, batch)
        s = pair_stats(r_c, r_r, batch.margin, cfg.loss.center_rewards_coefficient)
        (s.loss_sum / len(indices)).backward()  # / the whole batch: the mean over pairs, whatever the split
        stats.append(s)
    grad_norm = torch.nn.utils.clip_grad_norm_(p.model.parameters(), cfg.optim.clip_grad)
    p.optimizer.step()
    p.scheduler.step()
    return {**summarize(stats, "train"), "train/grad_norm": float(grad_norm), "train/lr": p.optimizer.param_groups[0]["lr"]}


def check_max_length(cfg: RMConfig) -> None:
    """data.max_length within the model's positions (its config.json, read without loading weights)."""
    from transformers import AutoConfig

    folder = resolve_model_path(cfg.model.partial_pretrain, "model.partial_pretrain")
    limit = getattr(AutoConfig.from_pretrained(folder), "max_position_embeddings", None)
    if limit is not None and cfg.data.max_length > limit:
        raise ConfigError(f"data.max_length={cfg.data.max_length} exceeds the model's max_position_embeddings={limit}; "
                          f"lower it to at most {limit}")


def run_rm(cfg: RMConfig, log=progress.write) -> dict[str, float]:
    """Train, save the final reward model into trainer.default_local_dir; the last metrics. Resumes from the
    newest checkpoint there (trainer.resume_mode=auto); Ctrl-C/SIGTERM ends after the current step with a
    checkpoint to resume from."""
    tr = cfg.trainer
    for note in validate_rm_config(cfg):  # ranges and choices were checked when the config was loaded
        log(note)
    check_max_length(cfg)  # before the memory estimate, which such a length would blow up
    log(describe_rm_memory(check_rm_memory(cfg)))  # refused here, before loading, if it cannot fit
    folder = resolve_model_path(cfg.model.partial_pretrain, "model.partial_pretrain")
    seen = checkpoint_listing(tr.default_local_dir)
    point = _resume_point(cfg, log)  # it only reads: a refused resume leaves the folder as it was
    check_output_dir(tr.default_local_dir, weights_bytes(folder))  # unwritable or full: fail now, not after training
    lock = RunLock(tr.default_local_dir, log=log)  # a second run on this folder stops here
    try:
        if checkpoint_listing(tr.default_local_dir) != seen:  # a run that ended meanwhile saved: decide again
            point = _resume_point(cfg, log)
        parts = _build(cfg, point, log)
        start = time.perf_counter()
        try:
            metrics = _loop(cfg, parts)
        finally:
            parts.tracker.close()
        with quiet_loading():  # no "Writing model shards" bar: the done line says where it went
            save_final(parts.model, parts.tokenizer, tr.default_local_dir)
    finally:
        lock.release()
    acc = metrics.get("val/pair_accuracy")
    trained = f"steps {parts.first}..{parts.total}" if parts.first <= parts.total else "no steps"
    log(f"done: {trained} in {time.perf_counter() - start:.0f}s, val pair accuracy "
        f"{'n/a' if acc is None else f'{acc:.3f}'}; reward model saved to {os.path.abspath(tr.default_local_dir)} "
        f"(use it as reward_model.model.path={os.path.abspath(tr.default_local_dir)})")
    return metrics


def _resume_point(cfg: RMConfig, log) -> ResumePoint | None:
    """The checkpoint to continue from (trainer.resume_mode), refusing one written with other results-changing keys."""
    tr = cfg.trainer
    point = find_resume_point(tr.resume_mode, tr.default_local_dir, tr.resume_from_path, log)
    if point is not None:
        check_same_config(point, cfg)
    return point


def _datasets(cfg: RMConfig, tokenizer, log) -> tuple[PreferenceDataset, PreferenceDataset | None]:
    d = cfg.data
    columns = PreferenceColumns(d.prompt_key, d.chosen_key, d.rejected_key, d.margin_key)
    train = PreferenceDataset(d.train_files, tokenizer, columns, d.max_length, "data.train_files")
    val = PreferenceDataset(d.val_files, tokenizer, columns, d.max_length, "data.val_files") if d.val_files else None
    for name, data in (("data.train_files", train), ("data.val_files", val)):
        if data is not None and data.num_identical:
            log(f"{name}: {data.num_identical} of {len(data)} pairs have the same chosen and rejected response "
                "(no signal: they add a constant log 2 to the loss)")
    return train, val


def _build(cfg: RMConfig, point: ResumePoint | None, log) -> _Parts:
    d, o, tr = cfg.data, cfg.optim, cfg.trainer
    torch.manual_seed(tr.seed)  # the fresh score head's initial weights
    with progress.phase("setup"):  # shown when the command runs under progress.reporting() (cli.cmd_rm)
        tokenizer = load_tokenizer(cfg.model.partial_pretrain)
        model = reward_model_to_train(cfg.model.partial_pretrain, tokenizer)
        train, val = _datasets(cfg, tokenizer, log)
    total = total_training_steps(len(train), d.train_batch_size, tr.total_epochs, tr.total_training_steps)
    optimizer, scheduler = build_optimizer(model.parameters(), o.lr, o.weight_decay, o.betas,
                                           warmup_steps_of(o.lr_warmup_steps, o.warmup_steps_ratio, total), total,
                                           o.lr_scheduler, 0.0)
    sampler = PromptSampler(len(train), d.train_batch_size, d.seed)
    first = 1
    if point is not None:
        restore_rm_checkpoint(point, model, optimizer, scheduler, sampler)
        log(f"resumed from step {point.step} (epoch {point.epoch}, sample {point.sample}) of {point.path}")
        first = point.step + 1
        if first > total:
            log(f"{point.path}: the run already finished (step {point.step} of {total}); nothing to train. Raise "
                "trainer.total_training_steps to continue, or set trainer.resume_mode=disable to start over")
    tracker = Tracker(tr.logger, tr.default_local_dir, write=log, experiment="rm",
                      resume_step=point.step if point is not None else None,
                      config=OmegaConf.to_container(OmegaConf.structured(cfg)))
    return _Parts(model, tokenizer, train, val, sampler, optimizer, scheduler, tracker, total, first)


def _loop(cfg: RMConfig, p: _Parts) -> dict[str, float]:
    tr, metrics = cfg.trainer, {}
    with progress.reporting() as shown, graceful("the current step") as stop:  # stop: after a whole step, saved
        for step in shown.steps(p.first, p.total, desc="rm"):
            metrics = train_step(cfg, p, p.sampler.next_batch())
            if p.val is not None and (step == p.total or (tr.test_freq > 0 and step % tr.test_freq == 0)):
                metrics.update(evaluate(p.model, p.val, cfg.data.micro_batch_size_per_gpu, p.tokenizer.pad_token_id,
                                        cfg.loss.center_rewards_coefficient))
            p.tracker.log(metrics, step)
            if (tr.save_freq > 0 and step % tr.save_freq == 0) or (stop.requested and step < p.total):
                save_rm_checkpoint(tr.default_local_dir, step, p.model, p.tokenizer, p.optimizer, p.scheduler,
                                   p.sampler, cfg)
            if stop.requested and step < p.total:
                raise StoppedEarly(step, stop.signal_name, tr.default_local_dir, resumes=True)
    return metrics
