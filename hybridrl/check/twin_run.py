"""The twin run that the resume and export checks share: the user's config on the shrunk twin (context.py's
run_config), trained uninterrupted for RUN_STEPS steps with a checkpoint at every step, once per CheckContext.

It runs as `hybridrl train` runs (build_run, then RLTrainer.fit), with two changes that the checks' details
name: the stand-in reward (stand_in_reward.py), so that the random twin's policy moves every step, and, when the
config has a rollout pool (async training), the synchronous dataflow: the export check reads the trained policy in
this process. The resume check's async part (resume_async.py) trains the real async dataflow on Ray apart.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, fields
from typing import Optional

from hybridrl.check import stand_in_reward
from hybridrl.check.context import RUN_STEPS, CheckContext
from hybridrl.config.async_checks import async_enabled
from hybridrl.config.schema_async import AsyncTrainingConfig
from hybridrl.trainer.rl import RLTrainer, RunSummary

STAND_IN = ("the twin run scores with a stand-in reward (0/1 from a checksum of each response: the random twin "
            "never earns the real scorer's reward, so the weights would never move); the reward check proves yours")
SYNC_ONLY = ("async rollouts are on (rollout.n_gpus_per_node x rollout.nnodes > 0): this twin run (shared with the "
             "export check) runs the synchronous dataflow; the resume check re-runs the in-flight buffer policy "
             "(README \"Asynchronous training\", Resume) on a Ray rollout pool")
UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/", "async/wait_s")  # wall clock and memory: differ run to run


@dataclass
class TwinRun:
    """A finished twin run: its folder (global_step_1 .. global_step_<steps>, metrics.jsonl) and the run object,
    whose policy still holds the trained weights."""

    run_dir: str
    steps: int
    run: object  # hybridrl.trainer.build.RLRun, after fit()
    summary: RunSummary
    base: str  # the twin's folder: the policy's weights before training
    seconds: float
    notes: list[str] = field(default_factory=list)  # what the twin run changes besides sizes (STAND_IN, SYNC_ONLY)
    log: list[str] = field(default_factory=list)  # the run's own log lines


def run_changes(ctx: CheckContext, pool: bool = False) -> dict[str, object]:
    """The key=value changes (dots as '__') of every twin run of these checks, beyond context.run_overrides'. An
    async config runs synchronously unless `pool` (the resume check's async part, resume_async.py, sizes it)."""
    batch = ctx.cfg.reward_model.reward_manager == "batch"
    changes: dict[str, object] = {"custom_reward_function__path": stand_in_reward.__file__,
                                  "custom_reward_function__name": "compute_score_batch" if batch else "compute_score"}
    if async_enabled(ctx.cfg) and not pool:  # no rollout pool, and the async keys at their defaults (else inert)
        changes.update(rollout__n_gpus_per_node=0, rollout__nnodes=0)
        changes.update({f"async_training__{f.name}": json.dumps(f.default) for f in fields(AsyncTrainingConfig)})
    return changes


def notes(ctx: CheckContext) -> list[str]:
    return [STAND_IN] + ([SYNC_ONLY] if async_enabled(ctx.cfg) else [])


def train(run_plan, log: list[str], trainer: type = RLTrainer) -> tuple[object, RunSummary]:
    """(run, summary) of one twin run, built and fitted as `hybridrl train` does; its log lines go to `log`."""
    from hybridrl import progress
    from hybridrl.trainer.build import build_run

    # the run's phase lines ("step 1 gen: 2.1 s") go to a file beside the run, not between the report's lines
    progress_log = f"{run_plan.config.trainer.default_local_dir.rstrip('/')}-progress.log"
    os.makedirs(os.path.dirname(os.path.abspath(progress_log)), exist_ok=True)
    with open(progress_log, "a") as stream, \
            progress.reporting(stream=stream, tty=False):
        run = build_run(run_plan, log=log.append)
        return run, trainer(run, log=log.append).fit()


def fresh_dir(work_dir: str, name: str) -> str:
    """<work_dir>/runs/<name>, emptied: a --work-dir kept from an earlier check must not be resumed from."""
    path = os.path.join(work_dir, "runs", name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def straight_run(ctx: CheckContext, steps: int = RUN_STEPS) -> TwinRun:
    """The uninterrupted twin run of `steps` steps (an epoch is 2 steps, so 3 cross an epoch boundary), run once
    per context and shared by the checks that need it."""
    cache = ctx.__dict__.setdefault("_straight_runs", {})  # per context, as functools.cached_property stores
    if steps not in cache:
        run_dir, lines, start = fresh_dir(ctx.work_dir, f"straight-{steps}"), [], time.perf_counter()
        run, summary = train(ctx.run_config(run_dir, steps, **run_changes(ctx)), lines)
        cache[steps] = TwinRun(run_dir, steps, run, summary, ctx.twin(), time.perf_counter() - start, notes(ctx), lines)
    return cache[steps]


def step_dir(run_dir: str, step: int) -> Optional[str]:
    """<run_dir>/global_step_<step> when it is a whole checkpoint, else None."""
    from hybridrl.trainer.manifest import problem_of

    path = os.path.join(run_dir, f"global_step_{step}")
    return path if os.path.isdir(path) and problem_of(path, verify="") is None else None


def held(parts: list) -> list[str]:
    """A failed check's details: what did hold (each passed part's summary), so the report shows how far it got."""
    return [f"held: {p.summary}" for p in parts if p.status == "pass"]
