"""A sweep checked against the config schema, with the validation `hybridrl train` uses
(config/validate.load_rl_config), before any trial runs: the base config must be valid and what the sweep
relies on must hold (metrics.jsonl, a step count, no rollout pool in a Ray-backend trial, its data files, a
folder it can write). The swept keys were checked with the file (sweep/keys.py).

A swept *value* is not judged here: a trial whose sampled config is invalid fails alone, with its error in the
results (sweep/trial.py), as the issue asks.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Optional

from hybridrl.config.async_checks import async_enabled
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError, raise_all
from hybridrl.sweep.spec import SWEEP_FILE, Base, SweepSpec

if TYPE_CHECKING:
    from hybridrl.plan.resolve import RunPlan

# the metric families hybridrl logs (verl's names); a metric matching none of them is probably a typo
KNOWN_METRICS = re.compile(r"^(val-core|val-aux|critic|actor|response_length|prompt_length|timing_s|"
                           r"timing_per_token_ms|perf|training|reward|num_turns|tool_call_counts|rollout|async)/")


def load_trial_config(base: Base, sampled: dict[str, Any], run_dir: Optional[str] = None) -> RunPlan:
    """A trial's resolved plan (plan/resolve.py), its config exactly as `hybridrl train --config base.config base.overrides... key=value...` would
    load it (the sampled keys never overlap the base's: sweep/spec.py refuses that), in its own run folder."""
    from hybridrl.plan.resolve import load_run_plan

    values = {**base.values, **sampled}
    if run_dir is not None:
        values.update({"trainer.default_local_dir": run_dir, "trainer.resume_mode": "auto"})
    return load_run_plan(base.config, base.overrides, values)


def check_sweep(spec: SweepSpec, log=print) -> tuple[RLConfig, BatchPlan]:
    """The base config with each swept key at its first value, and its plan; raises ConfigErrors naming every
    problem; warns (via `log`) about a metric that no trial may log."""
    from hybridrl.plan.resolve import load_rl_config_checked

    probe = {e.key: e.probe() for e in spec.space}  # the base may rely on a swept key (a batch size it lacks)
    base = spec.base
    cfg, base_errors, plan = load_rl_config_checked(base.config, base.overrides, {**base.values, **probe})
    where = f"base (with {', '.join(f'{k}={v!r}' for k, v in probe.items())}, each swept key's first value)"
    raise_all([f"{where}: {m}" for m in base_errors])
    raise_all(_run_problems(spec, cfg))
    for warning in metric_warnings(spec.metric, cfg):
        log(f"warning: {warning}")
    assert plan is not None
    return cfg, plan


def _run_problems(spec: SweepSpec, cfg: RLConfig) -> list[str]:
    tr, out = cfg.trainer, []
    if "file" not in tr.logger:
        out.append(f"base: trainer.logger={list(tr.logger)} has no 'file'; a sweep reads each trial's metrics.jsonl, "
                   "add file to trainer.logger")
    if tr.backend == "ray" and async_enabled(cfg):
        out.append("base: trainer.backend=ray with an asynchronous rollout pool (rollout.n_gpus_per_node): its engines "
                   "bind their threads to a node's cores by worker index (rollout/tp_layout.py), which trials running "
                   "side by side would share; sweep the synchronous schedule (rollout.n_gpus_per_node=0) or run "
                   "such configs one by one with hybridrl train")
    out += _data_problems(spec, cfg) + output_problems(spec.output)
    if tr.total_training_steps is None:
        out.append("base: trainer.total_training_steps is null; a sweep counts each trial's steps (the schedulers' "
                   "max_t, the last step's report), set it in base.overrides or sweep it in space")
    return out


def _data_problems(spec: SweepSpec, cfg: RLConfig) -> list[str]:
    """The base's data files, checked before any trial starts (every trial would fail on a missing one, each only
    after its start-up); a swept data key is its trials' own to check. Trials read paths from the sweep's folder
    of launch (sweep/driver.py keeps Ray from moving them into trial folders)."""
    from hybridrl.data.dataset import file_problem

    swept = {e.key for e in spec.space}
    out = []
    for key in ("data.train_files", "data.val_files"):
        if key not in swept:
            files = getattr(cfg.data, key.split(".")[1]) or []
            out += [f"base: {p}" for p in (file_problem(f, key) for f in files) if p]
    return out


def output_problems(output: str) -> list[str]:
    """Why the sweep folder `output` cannot hold this sweep: a file, a place where no folder can be made or written
    (paths.check_output_folder), or a folder of other things: the trials' folders would mix with them (a sweep's
    own folder has sweep.yaml)."""
    from hybridrl.library_logs import LOGS  # the sweep's driver.log, written from Ray's start, before sweep.yaml
    from hybridrl.paths import check_output_folder
    from hybridrl.trainer.runlock import LOCK_FILE

    try:
        check_output_folder(output, "output", shown=f"output={output!r}")
    except ConfigError as e:
        return [str(e)]
    if os.path.isdir(output) and set(os.listdir(output)) - {LOCK_FILE, LOGS} and not os.path.isfile(
            os.path.join(output, SWEEP_FILE)):
        return [f"output={output!r}: a folder that holds other files, not a sweep's (no {SWEEP_FILE}); give a new or "
                "empty folder"]
    return []


def metric_warnings(metric: str, cfg: RLConfig) -> list[str]:
    """Why `metric` may never be reported: not a metric family hybridrl logs, or a validation metric of a config
    that validates only before training."""
    out = []
    if not KNOWN_METRICS.match(metric):
        out.append(f"metric={metric!r} is not a name hybridrl logs (e.g. val-core/<data_source>/reward/mean@1, "
                   "critic/score/mean, response_length/mean); trials report it only if a callback logs it")
    elif metric.startswith(("val-core/", "val-aux/")):
        if cfg.trainer.test_freq <= 0:
            out.append(f"metric={metric!r} is a validation metric and trainer.test_freq={cfg.trainer.test_freq}: "
                       "trials never report it after step 0; set trainer.test_freq in base.overrides")
        if not cfg.data.val_files:
            out.append(f"metric={metric!r} is a validation metric and data.val_files is empty; give validation files")
        out += _reward_name_warnings(metric, cfg.actor_rollout_ref.rollout.val_kwargs.n)
    return out


def _reward_name_warnings(metric: str, n: int) -> list[str]:
    """A `val-core/<data_source>/reward/<name>` that validation never logs: the names carry the sample count
    (eval/metrics.group_metrics: mean@n and std@n, and for n > 1 best/worst/pass/maj@k for k = 1, 2, 4 ... n)."""
    from hybridrl.eval.metrics import ks_up_to

    parts = metric.split("/")
    if len(parts) != 4 or parts[0] != "val-core" or parts[2] != "reward":
        return []
    names = [f"mean@{n}", f"std@{n}"] + ([f"{s}@{k}" for s in ("best", "worst", "pass", "maj") for k in ks_up_to(n)]
                                         if n > 1 else [])
    if parts[3] in names:
        return []
    return [f"metric={metric!r} is never logged: with actor_rollout_ref.rollout.val_kwargs.n={n}, validation logs "
            f"val-core/{parts[1]}/reward/ {', '.join(names)}; did you mean val-core/{parts[1]}/reward/mean@{n}?"]
