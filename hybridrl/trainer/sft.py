"""Supervised fine-tuning: cross-entropy on response tokens only, token-mean over each batch."""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable

import torch
from omegaconf import OmegaConf

from hybridrl import progress
from hybridrl.batch import split
from hybridrl.plan.batch_plan import total_training_steps
from hybridrl.config.sft import SFTConfig, validate_sft_config
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.data.sft import SFTBatch, SFTDataset
from hybridrl.interrupt import StoppedEarly, graceful
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path, weights_bytes
from hybridrl.rewards.manager import RewardManager
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.trainer.checkpoint import check_output_dir, replace_text, write_step_folder
from hybridrl.trainer.manifest import MANIFEST, write_manifest
from hybridrl.trainer.runlock import RunLock
from hybridrl.trainer.tracking import Tracker
from hybridrl.trainer.validate import mean_val_score, validate
from hybridrl.workers.optim import build_optimizer, warmup_steps_of


def sft_loss(model, batch: SFTBatch, num_tokens: float) -> torch.Tensor:
    """Sum of response-token cross-entropies / num_tokens (the whole batch's response tokens)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
    logits, targets, mask = logits[:, :-1], batch.input_ids[:, 1:], batch.loss_mask[:, 1:]  # predict token t+1
    ce = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # [B, L-1]
    return (ce * mask).sum() / max(num_tokens, 1.0)


def save_hf(model, tokenizer, folder: str) -> None:
    """A HuggingFace folder loadable by AutoModelForCausalLM / AutoTokenizer.from_pretrained."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def save_step(model, tokenizer, root: str, step: int) -> str:
    """<root>/global_step_<step>: a HF folder written to a temporary folder, with a manifest of sizes and
    checksums, renamed into place (a crash never leaves half of one; eval/serve/export verify it)."""
    return write_step_folder(root, step, lambda tmp: save_hf(model, tokenizer, tmp))


def save_final(model, tokenizer, root: str) -> None:
    """The final model's files into `root` itself, with a manifest that eval/serve/export verify: written
    and hashed in a temporary folder, then moved in file by file, the manifest last."""
    tmp = os.path.join(root, f".tmp_final_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_hf(model, tokenizer, tmp)
    write_manifest(tmp, replace_text, step="final")
    names = sorted(os.listdir(tmp), key=lambda name: name == MANIFEST)
    if os.path.exists(os.path.join(root, MANIFEST)):
        os.remove(os.path.join(root, MANIFEST))  # the old manifest must not vouch for the new files
    for name in names:
        os.replace(os.path.join(tmp, name), os.path.join(root, name))
    os.rmdir(tmp)


@dataclass
class _Parts:
    """What the SFT loop uses."""

    model: torch.nn.Module
    tokenizer: object
    train: SFTDataset
    sampler: PromptSampler
    optimizer: torch.optim.Optimizer
    scheduler: object
    tracker: Tracker
    evaluate: Callable[[], dict[str, float]]
    total: int


def run_sft(cfg: SFTConfig, log=progress.write) -> dict[str, float]:
    """Train, save the final model into trainer.default_local_dir; the last metrics. Holds the folder's lock
    throughout; Ctrl-C/SIGTERM ends after the current step with its model saved (global_step_<N>)."""
    tr = cfg.trainer
    for note in validate_sft_config(cfg):  # ranges and choices were checked when the config was loaded
        log(note)
    folder = resolve_model_path(cfg.model.partial_pretrain, "model.partial_pretrain")
    check_output_dir(tr.default_local_dir, weights_bytes(folder))  # unwritable or full: fail now, not after training
    lock = RunLock(tr.default_local_dir, log=log)  # a second run on this folder stops here
    try:
        parts = _build(cfg, log)
        start = time.perf_counter()
        try:
            metrics = _loop(cfg, parts)
        finally:
            parts.tracker.close()
        save_final(parts.model, parts.tokenizer, tr.default_local_dir)
    finally:
        lock.release()
    score = mean_val_score(metrics)
    log(f"done: {parts.total} SFT steps in {time.perf_counter() - start:.0f}s, val score "
        f"{'n/a' if score is None else f'{score:.3f}'}; model saved to {os.path.abspath(tr.default_local_dir)}")
    return metrics


def _build(cfg: SFTConfig, log) -> _Parts:
    d, o, tr = cfg.data, cfg.optim, cfg.trainer
    torch.manual_seed(tr.seed)
    with progress.phase("setup"):  # shown when the command runs under progress.reporting() (cli.cmd_sft)
        tokenizer = load_tokenizer(cfg.model.partial_pretrain)
        model = load_causal_lm(cfg.model.partial_pretrain)
        train = SFTDataset(d.train_files, tokenizer, d.prompt_key, d.response_key, d.max_length, "data.train_files")
        val_rl = (RLDataset(d.val_files, tokenizer, d.prompt_key, d.max_length, key="data.val_files")
                  if d.val_files else None)
    total = total_training_steps(len(train), d.train_batch_size, tr.total_epochs, tr.total_training_steps)
    optimizer, scheduler = build_optimizer(model.parameters(), o.lr, o.weight_decay, o.betas,
                                           warmup_steps_of(o.lr_warmup_steps, o.warmup_steps_ratio, total), total,
                                           o.lr_scheduler, 0.0)
    engine = HFRolloutEngine(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id)
    greedy = SamplingParams(max_new_tokens=train.longest_response(), do_sample=False)
    reward = RewardManager(tokenizer)

    def evaluate() -> dict[str, float]:
        generate = functools.partial(generate_rollout, engine)
        return validate(generate, val_rl, reward, greedy, 1, tokenizer.pad_token_id).metrics if val_rl else {}

    tracker = Tracker(tr.logger, tr.default_local_dir, write=log, experiment="sft",
                      config=OmegaConf.to_container(OmegaConf.structured(cfg)))
    return _Parts(model, tokenizer, train, PromptSampler(len(train), d.train_batch_size, d.seed), optimizer, scheduler,
                  tracker, evaluate, total)


def _loop(cfg: SFTConfig, p: _Parts) -> dict[str, float]:
    d, tr, metrics = cfg.data, cfg.trainer, {}
    with progress.reporting() as shown, graceful("the current step") as stop:  # stop: after a whole step, saved
        for step in shown.steps(1, p.total, desc="sft"):
            batch = p.train.collate(p.sampler.next_batch(), p.tokenizer.pad_token_id)
            num_tokens = float(batch.loss_mask[:, 1:].sum())
            p.optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for micro in split(batch, d.micro_batch_size_per_gpu):
                part = sft_loss(p.model, micro, num_tokens)
                part.backward()
                loss += part.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(p.model.parameters(), cfg.optim.clip_grad)
            p.optimizer.step()
            p.scheduler.step()
            metrics = {"train/loss": loss, "train/grad_norm": float(grad_norm),
                       "train/lr": p.optimizer.param_groups[0]["lr"]}
            if step == p.total or (tr.test_freq > 0 and step % tr.test_freq == 0):
                metrics.update(p.evaluate())
            p.tracker.log(metrics, step)
            if (tr.save_freq > 0 and step % tr.save_freq == 0) or (stop.requested and step < p.total):
                save_step(p.model, p.tokenizer, tr.default_local_dir, step)
            if stop.requested and step < p.total:  # sft does not resume: the model so far is what is kept
                raise StoppedEarly(step, stop.signal_name, tr.default_local_dir, resumes=False)
    return metrics
