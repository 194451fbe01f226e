"""Supervised fine-tuning: cross-entropy on response tokens only, token-mean over each batch."""

from __future__ import annotations

import functools
import os
import time

import torch
from omegaconf import OmegaConf

from hybridrl import progress
from hybridrl.batch import split
from hybridrl.config.plan import total_training_steps
from hybridrl.config.sft import SFTConfig
from hybridrl.config.validate import check_choice
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.data.sft import SFTBatch, SFTDataset
from hybridrl.errors import ConfigError
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rewards.manager import RewardManager
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.trainer.optim import WARMUP_STYLES, build_optimizer, warmup_steps_of
from hybridrl.trainer.tracking import Tracker, check_loggers
from hybridrl.trainer.validate import mean_val_score, validate


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


def run_sft(cfg: SFTConfig, log=progress.write) -> dict[str, float]:
    d, o, tr = cfg.data, cfg.optim, cfg.trainer
    check_choice("optim.lr_scheduler", o.lr_scheduler, WARMUP_STYLES)
    check_loggers(tr.logger)
    if d.train_batch_size % d.micro_batch_size_per_gpu:
        raise ConfigError(f"data.micro_batch_size_per_gpu={d.micro_batch_size_per_gpu} must divide "
                          f"data.train_batch_size={d.train_batch_size}")
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
    sampler = PromptSampler(len(train), d.train_batch_size, d.seed)
    engine = HFRolloutEngine(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id)
    greedy = SamplingParams(max_new_tokens=train.longest_response(), do_sample=False)
    reward = RewardManager(tokenizer)
    tracker = Tracker(tr.logger, tr.default_local_dir, write=log, experiment="sft",
                      config=OmegaConf.to_container(OmegaConf.structured(cfg)))

    def evaluate() -> dict[str, float]:
        generate = functools.partial(generate_rollout, engine)
        return validate(generate, val_rl, reward, greedy, 1, tokenizer.pad_token_id).metrics if val_rl else {}

    with progress.reporting() as shown:  # a bar on a terminal, plain lines in a log
        start, metrics = time.perf_counter(), {}
        for step in shown.steps(1, total, desc="sft"):
            batch = train.collate(sampler.next_batch(), tokenizer.pad_token_id)
            num_tokens = float(batch.loss_mask[:, 1:].sum())
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for micro in split(batch, d.micro_batch_size_per_gpu):
                part = sft_loss(model, micro, num_tokens)
                part.backward()
                loss += part.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip_grad)
            optimizer.step()
            scheduler.step()
            metrics = {"train/loss": loss, "train/grad_norm": float(grad_norm),
                       "train/lr": optimizer.param_groups[0]["lr"]}
            if step == total or (tr.test_freq > 0 and step % tr.test_freq == 0):
                metrics.update(evaluate())
            tracker.log(metrics, step)
            if tr.save_freq > 0 and step % tr.save_freq == 0:
                save_hf(model, tokenizer, os.path.join(tr.default_local_dir, f"global_step_{step}"))
    tracker.close()
    save_hf(model, tokenizer, tr.default_local_dir)
    score = mean_val_score(metrics)
    log(f"done: {total} SFT steps in {time.perf_counter() - start:.0f}s, val score "
        f"{'n/a' if score is None else f'{score:.3f}'}; model saved to {os.path.abspath(tr.default_local_dir)}")
    return metrics
