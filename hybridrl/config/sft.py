"""Typed SFT config, with verl's SFT trainer key names (`model.partial_pretrain`, `data.response_key`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.config.schema import doc


@dataclass
class SFTData:
    train_files: list[str] = doc(["data/arithmetic/train.parquet"], "parquet file(s) of training rows")
    val_files: list[str] = doc(["data/arithmetic/val.parquet"], "parquet file(s) for validation (loss and greedy score)")
    prompt_key: str = doc("prompt", "column holding the chat messages")
    response_key: str = doc("extra_info.answer", "column (dotted for nested fields) holding the target response")
    max_length: int = doc(64, "longest prompt + response in tokens; longer rows are an error")
    train_batch_size: int = doc(64, "rows per optimizer step")
    micro_batch_size_per_gpu: int = doc(64, "rows per forward/backward")
    seed: int = doc(1, "seed of the row shuffle")


@dataclass
class SFTModel:
    partial_pretrain: str = doc("build/tiny-init", "model folder to start from")


@dataclass
class SFTOptim:
    lr: float = doc(1e-3, "peak learning rate of AdamW")
    weight_decay: float = doc(0.01, "AdamW weight decay")
    betas: list[float] = doc([0.9, 0.95], "AdamW betas")
    lr_warmup_steps: int = doc(-1, "linear warm-up steps; -1 uses warmup_steps_ratio")
    warmup_steps_ratio: float = doc(0.1, "linear warm-up as a fraction of total steps")
    lr_scheduler: str = doc("cosine", "schedule after warm-up: constant | cosine")
    clip_grad: float = doc(1.0, "max global gradient norm")


@dataclass
class SFTTrainer:
    default_local_dir: str = doc("build/tiny-sft", "where the final HuggingFace folder and metrics.jsonl go")
    total_training_steps: Optional[int] = doc(None, "stop after this many steps (null: total_epochs decides)")
    total_epochs: int = doc(1, "passes over the training rows")
    test_freq: int = doc(50, "validate every N steps (-1: only at the end)")
    save_freq: int = doc(-1, "also save a HuggingFace folder <default_local_dir>/global_step_<N> every N steps (-1: never)")
    logger: list[str] = doc(["console", "file"], "loggers: console, file (always on), tensorboard, wandb, "
                                                 "mlflow")
    seed: int = doc(0, "seed of torch (initial dropout/sampling state)")


@dataclass
class SFTConfig:
    data: SFTData = field(default_factory=SFTData)
    model: SFTModel = field(default_factory=SFTModel)
    optim: SFTOptim = field(default_factory=SFTOptim)
    trainer: SFTTrainer = field(default_factory=SFTTrainer)
