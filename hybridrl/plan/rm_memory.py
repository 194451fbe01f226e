"""`hybridrl rm`'s memory estimate, from the terms the RL trainer's estimate uses (plan/memory*.py), so that a
reward-model config that cannot fit is refused before the model loads, naming the key and a value that fits.

A reward model is the causal LM with its LM head replaced by a scalar score head (models/loading.py
reward_model_to_train), trained in one process on the CPU with fp32 weights and AdamW:
- resident: the runtime, the weights, their gradients and AdamW's two moments (16 bytes per parameter);
- the update: one micro-batch's forward + backward over its chosen and rejected rows together
  (2 x data.micro_batch_size_per_gpu rows of up to data.max_length tokens, padded, no LM head);
- the validation: the same rows' forward without gradients.
"""

from __future__ import annotations

import os

from hybridrl.plan.memory import RUNTIME_BYTES, PoolMemory, _dims, fmt_bytes, value_model_dims
from hybridrl.plan.memory_phases import Forward, Phase, forward_parts, update_parts
from hybridrl.plan.memory_terms import FP32
from hybridrl.config.rm import RMConfig
from hybridrl.errors import ConfigError

MICRO = "data.micro_batch_size_per_gpu"


def _phases(d, pairs: int, length: int, batch: int) -> tuple[Phase, Phase]:
    f, rows = Forward(), 2 * pairs  # fp32, padded rows; chosen and rejected in one forward (trainer/rm.py)
    return (Phase("reward-model update", update_parts(f, d, rows, 1, 0, length, lm_head=False), MICRO, pairs, batch),
            Phase("validation", forward_parts(f, d, rows, 1, 0, length, lm_head=False), MICRO, pairs))


def _pool(cfg: RMConfig, d, pairs: int, budget: int | None) -> PoolMemory:
    """The estimate at `pairs` per micro-batch, for the model of dims `d` (value_model_dims)."""
    resident = {"runtime (Python, torch, transformers)": RUNTIME_BYTES, "reward model weights": FP32 * d.params,
                "reward model gradients": FP32 * d.params, "reward model AdamW moments": 2 * FP32 * d.params}
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    source = f"{fmt_bytes(ram)} of RAM" if budget is None else f"a budget of {fmt_bytes(budget)}"
    phases = _phases(d, pairs, cfg.data.max_length, cfg.data.train_batch_size)
    return PoolMemory("reward-model trainer", 1, resident, phases, ram if budget is None else budget, source)


def estimate_rm_memory(cfg: RMConfig, budget: int | None = None) -> PoolMemory:
    """The trainer process's estimate; `budget` in bytes (None: this machine's RAM). cfg's micro-batch size must be
    set (validate_rm_config derives it when null)."""
    d = value_model_dims(_dims(cfg.model.partial_pretrain, "model.partial_pretrain"))
    return _pool(cfg, d, cfg.data.micro_batch_size_per_gpu, budget)


def check_rm_memory(cfg: RMConfig, budget: int | None = None) -> PoolMemory:
    """The estimate, or a ConfigError when its peak exceeds the budget, proposing the largest micro-batch size (a
    divisor of data.train_batch_size) that fits, or saying that none does."""
    d = value_model_dims(_dims(cfg.model.partial_pretrain, "model.partial_pretrain"))  # read once for every size
    batch, micro = cfg.data.train_batch_size, cfg.data.micro_batch_size_per_gpu
    pool = _pool(cfg, d, micro, budget)
    if pool.peak_bytes <= pool.budget:
        return pool
    fit = next((m for m in range(micro - 1, 0, -1)  # the largest divisor of the batch below micro that fits
                if batch % m == 0 and _pool(cfg, d, m, budget).peak_bytes <= pool.budget), None)
    if fit is not None:
        fix = f"set {MICRO}={fit} (the same gradients: micro-batches add up to the batch mean)"
    else:
        fix = ("no micro-batch size fits: lower data.max_length, or train on a machine with more memory (the "
               f"resident states alone take {fmt_bytes(sum(pool.resident.values()))})")
    raise ConfigError(f"the reward-model trainer needs about {fmt_bytes(pool.peak_bytes)} at its peak "
                      f"({pool.peak_phase}, {MICRO}={micro}), more than {pool.budget_source}; {fix}")


def describe_rm_memory(pool: PoolMemory) -> str:
    """The plan's memory lines, in the RL trainer's format (plan/memory.MemoryReport)."""
    from hybridrl.plan.memory import MemoryReport

    return MemoryReport((pool,)).describe()
