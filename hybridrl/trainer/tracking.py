"""Metric loggers: `console` (one compact line per step) and `file` (every metric, JSON lines)."""

from __future__ import annotations

import json
import math
import os
from typing import Callable, Optional

from tqdm import tqdm

LOGGERS = ("console", "file")
CONSOLE_KEYS = [  # (metric, short label) shown on the console line when present
    ("train/loss", "loss"), ("critic/score/mean", "score"), ("actor/pg_loss", "pg_loss"), ("actor/entropy", "entropy"),
    ("actor/ppo_kl", "ppo_kl"), ("actor/kl_loss", "kl_loss"), ("response_length/mean", "resp_len"),
    ("timing_s/step", "step_s"),
]


class Tracker:
    """`loggers` are names from LOGGERS (checked in config validation)."""

    def __init__(self, loggers: list[str], run_dir: str, write: Callable[[str], None] = tqdm.write,
                 resume_step: Optional[int] = None):
        self.loggers, self.write = loggers, write
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self._file = None
        if "file" in loggers:
            os.makedirs(run_dir, exist_ok=True)
            kept = []
            if resume_step is not None and os.path.exists(self.path):  # keep what the checkpoint's run logged
                with open(self.path, encoding="utf-8") as f:
                    kept = [line for line in f if _step_of(line) <= resume_step]
            self._file = open(self.path, "w", encoding="utf-8")  # a new run starts a new file
            self._file.writelines(kept)
            self._file.flush()

    def log(self, metrics: dict[str, float], step: int) -> None:
        if "console" in self.loggers:
            self.write(format_line(metrics, step))
        if self._file is not None:
            record = {"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}}
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _step_of(line: str) -> float:
    """The step of a metrics.jsonl line; infinity for a line a kill cut short (it is redone)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


def format_line(metrics: dict[str, float], step: int) -> str:
    parts = [f"step {step}"]
    parts += [f"{label}={metrics[key]:.4g}" for key, label in CONSOLE_KEYS if key in metrics]
    if metrics.get("reward/errors"):  # scorer failures scored 0 (reward_model.on_error=zero): never unnoticed
        parts.append(f"reward_errors={metrics['reward/errors']:.0f}")
    parts += [f"{key}={value:.4g}" for key, value in metrics.items()
              if key.startswith("val-core/") and "/reward/mean@" in key]
    return " | ".join(parts)
