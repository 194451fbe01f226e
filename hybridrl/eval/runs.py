"""Training runs read back from their folders, for `hybridrl plot` and `hybridrl compare`.

A run folder (trainer.default_local_dir) holds `metrics.jsonl`, one JSON object per logged step,
and `config.yaml`. The reader is lenient where a run can leave marks: a kill may cut the last line
short and a diverged metric is written as the string "nan"/"inf"/"-inf"; such lines are skipped and
such values kept as floats, so a crashed run can still be looked at.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter

from hybridrl.errors import DataError

Series = list[tuple[int, float]]  # (step, value), steps ascending
KL_KEYS = ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl")  # preference order, see kl_key
_VAL_KEY = re.compile(r"^val-core/(?P<source>.+)/reward/(?P<stat>mean|pass|maj)@(?P<k>\d+)$")
_NONFINITE = {"nan", "inf", "-inf"}


@dataclasses.dataclass(frozen=True)
class Run:
    """One run: `series[key]` are the (step, value) pairs at which `key` was logged."""

    name: str
    path: str  # the metrics.jsonl read
    series: dict[str, Series]

    @property
    def last_step(self) -> int:
        return max(step for points in self.series.values() for step, _ in points)


def load_run(path: str) -> Run:
    """A run folder, or a metrics.jsonl file directly; named by its trainer.experiment_name."""
    metrics_path = path if os.path.isfile(path) else os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise DataError(f"{path}: no metrics.jsonl there; pass a run folder (the trainer.default_local_dir of a run "
                        "logged with trainer.logger including 'file') or a metrics.jsonl file")
    series = _read_metrics(metrics_path)
    if not series:
        raise DataError(f"{metrics_path}: no complete metric line; the run logged nothing yet (wait for its first "
                        "step) or the file is not a hybridrl metrics.jsonl")
    folder = os.path.dirname(os.path.abspath(metrics_path))
    return Run(_experiment_name(folder) or os.path.basename(folder), metrics_path, series)


def load_runs(paths: list[str]) -> list[Run]:
    """`load_run` for each path; runs sharing an experiment_name (a common case: the name is a config
    default) get the shortest tail of their folder path that tells them apart, e.g. "exp (seed1)"."""
    runs = [load_run(p) for p in paths]
    files = Counter(os.path.realpath(r.path) for r in runs)
    if twice := [f for f, n in files.items() if n > 1]:
        raise DataError(f"{twice[0]}: given more than once; pass each run once")
    counts = Counter(r.name for r in runs)
    for name in (n for n, c in counts.items() if c > 1):
        same = [i for i, r in enumerate(runs) if r.name == name]
        tails = _distinct_tails([_source(runs[i].path) for i in same])
        for i, tail in zip(same, tails):
            runs[i] = dataclasses.replace(runs[i], name=f"{name} ({tail})")
    return runs


def kl_key(run: Run) -> str | None:
    """The KL a run optimised against: its KL loss, else its KL-in-reward penalty, else the
    policy-vs-rollout KL every PPO-style update logs (which is near zero for one update per batch)."""
    return next((k for k in KL_KEYS if k in run.series), None)


def val_keys(keys) -> list[str]:
    """The per-source validation accuracy keys among `keys` (mean@N, pass@k, maj@k), grouped by source."""
    order = {"mean": 0, "pass": 1, "maj": 2}
    found = [(m["source"], order[m["stat"]], int(m["k"]), key) for key in keys if (m := _VAL_KEY.match(key))]
    return [key for *_, key in sorted(found)]


def val_accuracy(run: Run) -> Series:
    """Validation accuracy per validation step: the mean over data sources of val-core/<src>/reward/mean@N."""
    by_step: dict[int, list[float]] = {}
    for key in val_keys(run.series):
        if _VAL_KEY.match(key)["stat"] == "mean":
            for step, value in run.series[key]:
                by_step.setdefault(step, []).append(value)
    return [(step, sum(v) / len(v)) for step, v in sorted(by_step.items())]


def _read_metrics(path: str) -> dict[str, Series]:
    values: dict[str, dict[int, float]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:  # undecodable bytes: that line is skipped below
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:  # cut short by a kill, or not text
                continue
            step = record.get("step") if isinstance(record, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                continue
            for key, value in record.items():
                if key != "step" and (number := _number(value)) is not None:
                    values.setdefault(key, {})[step] = number  # a step logged twice: the later line wins
    return {key: sorted(points.items()) for key, points in values.items()}


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.lower() in _NONFINITE:  # how the tracker writes non-finite floats
        return float(value)
    return None


def _experiment_name(folder: str) -> str | None:
    path = os.path.join(folder, "config.yaml")
    if not os.path.isfile(path):
        return None
    from omegaconf import OmegaConf

    try:
        name = OmegaConf.select(OmegaConf.load(path), "trainer.experiment_name", default=None)
    except Exception as e:  # a YAML parse error: report the file rather than a parser traceback
        raise DataError(f"{path}: cannot read it ({type(e).__name__}: {e}); fix or remove the file") from e
    return str(name) if name else None


def _source(metrics_path: str) -> str:
    """What the user pointed at: the run folder, or the file itself when it has another name."""
    path = os.path.realpath(metrics_path)
    return os.path.dirname(path) if os.path.basename(path) == "metrics.jsonl" else path


def _distinct_tails(paths: list[str]) -> list[str]:
    """The shortest trailing path parts that differ between `paths` (distinct, so this ends)."""
    parts = [path.split(os.sep) for path in paths]
    depth = 1
    while len(set(tails := ["/".join(p[-depth:]) for p in parts])) < len(parts):
        depth += 1
    return tails
