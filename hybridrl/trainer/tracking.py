"""Metric loggers (`trainer.logger`): console, file (metrics.jsonl), tensorboard, wandb, mlflow.

Every backend takes the same two calls: `log(metrics, step)` for scalars with verl's names and
`log_generations(rows, step)` for sample generations (trainer.log_val_generations). The optional
backends import their library in their own constructor, so a run without them never loads it.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Callable, Optional

from hybridrl import progress
from hybridrl.config.loggers import LOGGERS, OPTIONAL, check_loggers  # noqa: F401  re-exported

CONSOLE_KEYS = [  # (metric, short label) shown on the console line when present
    ("train/loss", "loss"), ("critic/score/mean", "score"), ("actor/pg_loss", "pg_loss"), ("actor/entropy", "entropy"),
    ("actor/ppo_kl", "ppo_kl"), ("actor/kl_loss", "kl_loss"), ("response_length/mean", "resp_len"),
    ("timing_s/step", "step_s"), ("train/pair_accuracy", "acc"), ("val/pair_accuracy", "val_acc"),  # the last two: rm
]
Rows = list[dict]  # sample generations: {"input", "output", "score", ...} per row


class ConsoleLogger:
    def __init__(self, write: Callable[[str], None]):
        self.write = write

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.write(format_line(metrics, step))

    def log_generations(self, rows: Rows, step: int) -> None:
        for i, row in enumerate(rows):
            self.write(f"step {step} sample {i + 1}/{len(rows)} score={row['score']:.4g}: "
                       f"{_short(row['input'])!r} -> {_short(row['output'])!r}")

    def close(self) -> None:
        pass


class FileLogger:
    """`metrics.jsonl` (one line per step, every metric) and `val_generations.jsonl` in the run folder.
    On resume the lines after the checkpoint's step are dropped: they are about to be redone."""

    def __init__(self, run_dir: str, resume_step: Optional[int]):
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self._file = _reopen(self.path, resume_step)
        self._generations = _reopen(os.path.join(run_dir, "val_generations.jsonl"), resume_step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def log_generations(self, rows: Rows, step: int) -> None:
        self._generations.writelines(json.dumps({"step": step, **row}) + "\n" for row in rows)
        self._generations.flush()

    def close(self) -> None:
        self._file.close()
        self._generations.close()


def _reopen(path: str, resume_step: Optional[int]):
    """A new file for a new run; on resume the lines up to resume_step, then appending."""
    kept = []
    if resume_step is not None and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            kept = [line for line in f if _step_of(line) <= resume_step]
    file = open(path, "w", encoding="utf-8")
    file.writelines(kept)
    file.flush()
    return file


class TensorBoardLogger:
    """Event files in `<run_dir>/tensorboard`; a resumed run purges the events after its checkpoint."""

    def __init__(self, run_dir: str, resume_step: Optional[int]):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = os.path.join(run_dir, "tensorboard")
        self.writer = SummaryWriter(self.log_dir, purge_step=None if resume_step is None else resume_step + 1)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_generations(self, rows: Rows, step: int) -> None:
        self.writer.add_text("val/generations", _markdown_table(rows), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """One wandb run per process (project = trainer.project_name, name = trainer.experiment_name).
    Offline with WANDB_MODE=offline; files go under `<run_dir>/wandb` unless WANDB_DIR says otherwise."""

    def __init__(self, run_dir: str, project: str, experiment: str, config: dict):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=experiment, config=config,
                              dir=os.environ.get("WANDB_DIR", run_dir), reinit="create_new")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_generations(self, rows: Rows, step: int) -> None:
        columns = list(rows[0])
        self.run.log({"val/generations": self.wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])},
                     step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    """An MLflow run in experiment trainer.project_name named trainer.experiment_name. The store is
    MLFLOW_TRACKING_URI when set, else `<run_dir>/mlflow.db` (SQLite; MLflow 3 retired the plain
    file store) with artifacts in `<run_dir>/mlartifacts`."""

    def __init__(self, run_dir: str, project: str, experiment: str, config: dict):
        import mlflow

        self.mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:  # a store of its own in the run folder, artifacts beside it (not in the working directory)
            mlflow.set_tracking_uri("sqlite:///" + os.path.abspath(os.path.join(run_dir, "mlflow.db")))
            if mlflow.get_experiment_by_name(project) is None:
                mlflow.create_experiment(project, artifact_location=Path(run_dir, "mlartifacts").absolute().as_uri())
        else:
            mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=experiment)
        mlflow.log_dict(config, "config.yaml")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics({mlflow_key(k): v for k, v in metrics.items()}, step=step)

    def log_generations(self, rows: Rows, step: int) -> None:
        self.mlflow.log_text("".join(json.dumps(r) + "\n" for r in rows), f"val_generations/step_{step}.jsonl")

    def close(self) -> None:
        self.mlflow.end_run()


def mlflow_key(key: str) -> str:
    """MLflow metric names allow letters, digits, _ - . / and space: `pass@4` becomes `pass_at_4`."""
    return re.sub(r"[^\w\-. /]", "_", key.replace("@", "_at_"))


class Tracker:
    """Fans each call out to the loggers named in trainer.logger. The file logger is always on:
    metrics.jsonl is what resume, `hybridrl plot` and `hybridrl compare` read."""

    def __init__(self, loggers: list[str], run_dir: str, write: Callable[[str], None] = progress.write,
                 resume_step: Optional[int] = None, project: str = "hybridrl", experiment: str = "run",
                 config: Optional[dict] = None):
        check_loggers(loggers)
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.backends: list = []
        try:
            for name in ["file"] + [name for name in loggers if name != "file"]:
                self.backends.append(self._make(name, run_dir, write, resume_step, project, experiment, config or {}))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _make(name, run_dir, write, resume_step, project, experiment, config):
        if name == "console":
            return ConsoleLogger(write)
        if name == "file":
            return FileLogger(run_dir, resume_step)
        if name == "tensorboard":
            return TensorBoardLogger(run_dir, resume_step)
        if name == "wandb":
            return WandbLogger(run_dir, project, experiment, config)
        return MlflowLogger(run_dir, project, experiment, config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for backend in self.backends:
            backend.log(metrics, step)

    def log_generations(self, rows: Rows, step: int) -> None:
        if rows:
            for backend in self.backends:
                backend.log_generations(rows, step)

    def close(self) -> None:
        while self.backends:
            self.backends.pop().close()


def _step_of(line: str) -> float:
    """The step of a jsonl line; infinity for a line a kill cut short (it is redone)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _markdown_table(rows: Rows) -> str:
    columns = list(rows[0])
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def format_line(metrics: dict[str, float], step: int) -> str:
    parts = [f"step {step}"]
    parts += [f"{label}={metrics[key]:.4g}" for key, label in CONSOLE_KEYS if key in metrics]
    if metrics.get("reward/errors"):  # scorer failures scored 0 (reward_model.on_error=zero): never unnoticed
        parts.append(f"reward_errors={metrics['reward/errors']:.0f}")
    parts += [f"{key}={value:.4g}" for key, value in metrics.items()
              if key.startswith("val-core/") and "/reward/mean@" in key]
    return " | ".join(parts)
