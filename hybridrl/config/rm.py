"""Typed reward-model training config (`hybridrl rm`): the SFT trainer's key names where they mean the
same (`model.partial_pretrain`, `data.train_batch_size`, `optim.*`, `trainer.*`), plus the preference
columns and verl's resume keys (`trainer.resume_mode`, `trainer.resume_from_path`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.config.schema import RESUME_MODES, SEED_MAX, doc
from hybridrl.config.sft import SFTOptim, derive_micro_batch
from hybridrl.errors import ConfigError


@dataclass
class RMData:
    train_files: list[str] = doc(["data/rm_arith/train.parquet"], "parquet/jsonl file(s) of preference pairs")
    val_files: list[str] = doc(["data/rm_arith/val.parquet"], "held-out pairs for pair accuracy and mean margin "
                                                              "([]: no validation)")
    prompt_key: str = doc("prompt", "column of the prompt: chat messages, or a string (one user message)")
    chosen_key: str = doc("chosen", "column of the preferred response: [{'role': 'assistant', 'content': ...}] or a "
                                    "string")
    rejected_key: str = doc("rejected", "column of the dispreferred response, in the chosen column's layout")
    margin_key: str = doc("margin", "column of a per-pair margin m in -log sigmoid(r_c - r_r - m) (Llama 2); a file "
                                    "without this column trains with m = 0")
    max_length: int = doc(128, "longest chat-templated prompt + response + EOS in tokens; longer rows are an error",
                          ge=1)
    train_batch_size: int = doc(32, "pairs per optimizer step", ge=1)
    micro_batch_size_per_gpu: Optional[int] = doc(None, "pairs per forward/backward (null: the largest divisor of "
                                                        "train_batch_size up to 64)", ge=1)
    seed: int = doc(1, "seed of the pair shuffle", ge=0, le=SEED_MAX)


@dataclass
class RMModel:
    partial_pretrain: str = doc("tiny-arith", "causal LM folder (a fresh scalar head is added) or a "
                                              "*ForSequenceClassification reward model to go on training")


@dataclass
class RMLoss:
    center_rewards_coefficient: float = doc(0.0, "weight of (r_c + r_r)^2, which keeps rewards centred on 0 "
                                                 "(Eisenstein et al. 2023; TRL's name); 0: off", ge=0)


@dataclass
class RMTrainer:
    default_local_dir: str = doc("build/tiny-rm", "run folder: the final reward model (a HuggingFace folder for "
                                                  "reward_model.model.path), metrics.jsonl and checkpoints")
    total_training_steps: Optional[int] = doc(None, "stop after this many steps (null: total_epochs decides)", ge=1)
    total_epochs: int = doc(1, "passes over the training pairs", ge=1)
    test_freq: int = doc(50, "validate every N steps (-1: only at the end)",
                         ge=-1, hint="(N > 0: every N steps; -1 or 0: only at the end)")
    save_freq: int = doc(-1, "checkpoint every N steps into <default_local_dir>/global_step_<N> (a reward-model "
                             "folder plus optimizer, sampler and RNG state to resume from; -1: never)",
                         ge=-1, hint="(N > 0: every N steps; -1 or 0: never)")
    resume_mode: str = doc("auto", "auto (the newest whole checkpoint in default_local_dir, else start) | disable "
                                   "(start over) | resume_path (trainer.resume_from_path)", choices=RESUME_MODES)
    resume_from_path: Optional[str] = doc(None, "the global_step_<N> folder to resume from (resume_mode=resume_path)")
    logger: list[str] = doc(["console", "file"], "loggers: console, file (always on), tensorboard, wandb, mlflow")
    seed: int = doc(0, "seed of torch (the new score head's initial weights)", ge=0, le=SEED_MAX)


@dataclass
class RMConfig:
    data: RMData = field(default_factory=RMData)
    model: RMModel = field(default_factory=RMModel)
    optim: SFTOptim = field(default_factory=SFTOptim)  # the same AdamW + warm-up + schedule keys as sft
    loss: RMLoss = field(default_factory=RMLoss)
    trainer: RMTrainer = field(default_factory=RMTrainer)


def validate_rm_config(cfg: RMConfig) -> list[str]:
    """The cross-key rules of a reward-model config (single keys were checked at load); derives a null
    data.micro_batch_size_per_gpu in place. Returns the notes of derived values, for the log."""
    from hybridrl.config.loggers import check_loggers

    check_loggers(cfg.trainer.logger)
    keys = {"data.prompt_key": cfg.data.prompt_key, "data.chosen_key": cfg.data.chosen_key,
            "data.rejected_key": cfg.data.rejected_key}
    if len(set(keys.values())) < len(keys):
        raise ConfigError(f"{', '.join(f'{k}={v!r}' for k, v in keys.items())} must name three different columns")
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>")
    return derive_micro_batch(cfg.data)
