"""Typed SFT config, with verl's SFT trainer key names (`model.partial_pretrain`, `data.response_key`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.batching import largest_divisor
from hybridrl.config.schema import SEED_MAX, WARMUP_STYLES, doc
from hybridrl.errors import ConfigError

SFT_MICRO_CAP = 64  # most rows per forward/backward when data.micro_batch_size_per_gpu is derived


@dataclass
class SFTData:
    train_files: list[str] = doc(["data/arithmetic/train.parquet"], "parquet file(s) of training rows")
    val_files: list[str] = doc(["data/arithmetic/val.parquet"], "parquet file(s) for validation (loss and greedy score)")
    prompt_key: str = doc("prompt", "column holding the chat messages")
    response_key: str = doc("extra_info.answer", "column (dotted for nested fields) holding the target response")
    max_length: int = doc(64, "longest prompt + response in tokens; longer rows are an error", ge=1)
    train_batch_size: int = doc(64, "rows per optimizer step", ge=1)
    micro_batch_size_per_gpu: Optional[int] = doc(None, "rows per forward/backward (null: the largest divisor of "
                                                        "train_batch_size up to 64)", ge=1)
    seed: int = doc(1, "seed of the row shuffle", ge=0, le=SEED_MAX)


@dataclass
class SFTModel:
    partial_pretrain: str = doc("build/tiny-init", "model folder to start from")


@dataclass
class SFTOptim:
    lr: float = doc(1e-3, "peak learning rate of AdamW", gt=0)
    weight_decay: float = doc(0.01, "AdamW weight decay", ge=0)
    betas: list[float] = doc([0.9, 0.95], "AdamW betas",
                             ge=0, lt=1, length=2, hint="(AdamW's beta1, beta2; e.g. [0.9, 0.95])")
    lr_warmup_steps: int = doc(-1, "linear warm-up steps; -1 uses warmup_steps_ratio",
                               ge=0, also=(-1,), hint="(-1: warmup_steps_ratio decides)")
    warmup_steps_ratio: float = doc(0.1, "linear warm-up as a fraction of total steps", ge=0, le=1)
    lr_scheduler: str = doc("cosine", "schedule after warm-up: constant | cosine", choices=WARMUP_STYLES)
    clip_grad: float = doc(1.0, "max global gradient norm", gt=0, hint="(a norm: <= 0 would flip or zero the gradient)")


@dataclass
class SFTTrainer:
    default_local_dir: str = doc("build/tiny-sft", "where the final HuggingFace folder and metrics.jsonl go")
    total_training_steps: Optional[int] = doc(None, "stop after this many steps (null: total_epochs decides)", ge=1)
    total_epochs: int = doc(1, "passes over the training rows", ge=1)
    test_freq: int = doc(50, "validate every N steps (-1: only at the end)",
                         ge=-1, hint="(N > 0: every N steps; -1 or 0: only at the end)")
    save_freq: int = doc(-1, "also save a HuggingFace folder <default_local_dir>/global_step_<N> every N steps (-1: never)",
                         ge=-1, hint="(N > 0: every N steps; -1 or 0: never)")
    logger: list[str] = doc(["console", "file"], "loggers: console, file (always on), tensorboard, wandb, "
                                                 "mlflow")
    seed: int = doc(0, "seed of torch (initial dropout/sampling state)", ge=0, le=SEED_MAX)


@dataclass
class SFTConfig:
    data: SFTData = field(default_factory=SFTData)
    model: SFTModel = field(default_factory=SFTModel)
    optim: SFTOptim = field(default_factory=SFTOptim)
    trainer: SFTTrainer = field(default_factory=SFTTrainer)


def validate_sft_config(cfg: SFTConfig) -> list[str]:
    """The cross-key rules of an SFT config (single keys were checked at load); derives a null
    data.micro_batch_size_per_gpu in place (derive_micro_batch). Returns the notes of derived values, for the log."""
    from hybridrl.config.loggers import check_loggers

    check_loggers(cfg.trainer.logger)
    return derive_micro_batch(cfg.data)


def derive_micro_batch(d) -> list[str]:
    """`d` has train_batch_size and micro_batch_size_per_gpu (the data section of sft and rm): a null
    micro_batch_size_per_gpu becomes the largest divisor of train_batch_size up to SFT_MICRO_CAP, in place;
    a given one must divide train_batch_size. Returns the note of a derived value, for the log."""
    if d.micro_batch_size_per_gpu is None:
        d.micro_batch_size_per_gpu = largest_divisor(d.train_batch_size, SFT_MICRO_CAP)
        return [f"data.micro_batch_size_per_gpu={d.micro_batch_size_per_gpu} (derived: the largest divisor of "
                f"data.train_batch_size={d.train_batch_size} up to {SFT_MICRO_CAP})"]
    if d.train_batch_size % d.micro_batch_size_per_gpu:
        raise ConfigError(f"data.micro_batch_size_per_gpu={d.micro_batch_size_per_gpu} must divide "
                          f"data.train_batch_size={d.train_batch_size}; use one of "
                          f"{', '.join(str(k) for k in range(1, d.train_batch_size + 1) if d.train_batch_size % k == 0)} "
                          "(or null to derive it)")
    return []
