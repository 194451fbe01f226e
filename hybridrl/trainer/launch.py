"""Train a validated RL config: what `hybridrl train` and hybridrl.train both do once the config is loaded
(one code path: the batch plan and version notes first, library logs routed into the run folder, the run
built and fitted under one progress reporter, the summary line last)."""

from __future__ import annotations

import functools
from typing import Callable, Optional

from hybridrl import progress
from hybridrl.interrupt import Interrupted, StoppedEarly
from hybridrl.plan.resolve import RunPlan
from hybridrl.rewards.pool import FunctionRef
from hybridrl.trainer.callbacks import Callbacks
from hybridrl.trainer.rl import RunSummary


def launch(run_plan: RunPlan, *, reward: Optional[FunctionRef] = None,
           callbacks: Optional[Callbacks] = None, log: Optional[Callable[[str], None]] = None,
           agent: Optional[Callable] = None) -> RunSummary:
    """Build and fit the run of `run_plan` (plan/resolve.py: load_run_plan or resolve gave it). `reward`: a reward
    function from Python instead of custom_reward_function.*; `agent`: an agent function from Python instead of
    actor_rollout_ref.rollout.agent.path; `log`: where hybridrl's own lines go (None: the
    console, as the CLI prints them; the step lines are trainer.logger's)."""
    from hybridrl.library_logs import route_library_logging
    from hybridrl.trainer.build import build_run
    from hybridrl.trainer.rl import RLTrainer
    from hybridrl.versions import untested_here

    cfg = run_plan.config
    say = log or functools.partial(print, flush=True)
    say(run_plan.batch.describe())
    for package in untested_here():  # torch / transformers / vllm outside what the suite passed on
        say(package.line())
    log_file = route_library_logging(cfg.trainer.default_local_dir)  # Ray's and vLLM's notes: <run>/logs/driver.log
    if cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.trainer.backend == "local":  # (Ray's workers: their line)
        say(f"vLLM engine output: {log_file}")
    try:
        with progress.reporting() as shown:  # from here on, what runs is shown (hybridrl/progress.py)
            write = log or shown.write
            with progress.phase("setup"):  # tokenizing the data, loading the models, starting workers or engines
                run = build_run(run_plan, log=write, reward=reward, agent=agent)
            write(f"{len(run.train_data)} training prompts, {run.total_steps} steps; run folder {run.run_dir}")
            summary = RLTrainer(run, log=write, callbacks=callbacks).fit()
    except Interrupted as e:
        e.message += where_to_resume(e, cfg.trainer.default_local_dir)
        raise
    say(summary.line())
    return summary


def where_to_resume(e: Interrupted, run_dir: str) -> str:
    """What a stop-at-once leaves to resume from (a clean stop says so itself)."""
    from hybridrl.trainer.checkpoint import latest_complete

    if isinstance(e, StoppedEarly):
        return ""
    point = latest_complete(run_dir)
    if point is None:
        return "; no checkpoint was saved yet"
    return f"; the steps after the last checkpoint ({point.path}) are lost — run the same command to resume from it"
