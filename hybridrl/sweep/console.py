"""The sweep's console: one line per trial event, in place of Ray Tune's status tables.

Tune at verbose=1 printed a table every 30 s, a 60-row table of every metric at each trial's end, a whole
traceback for an invalid trial, and the trials' own output interleaved under Ray's `(run_trial pid=...)` prefix
(with Ray's de-duplication folding different step lines into "[repeated 3x across cluster]"). The sweep runs Tune
at verbose=0; each trial's output goes to `<trial>/logs/console.log` (sweep/trial.py) and Tune's own log records
to `<sweep>/logs/driver.log` (library_logs.py). What is left on the console is this callback's lines:

    trial 1113a_00000 started: actor_rollout_ref.actor.optim.lr=0.0001
    trial 1113a_00000 step 10: val-core/arithmetic/reward/mean@1=0.3125
    trial 1113a_00000 finished at step 30: val-core/arithmetic/reward/mean@1=0.57 (best 0.57)
    trial 1113a_00001 stopped by the scheduler at step 10: val-core/arithmetic/reward/mean@1=0.068 (best 0.356)
    trial 1113a_00002 error: invalid sampled config ...; its output: <sweep>/1113a_00002/logs/console.log
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from ray.tune import Callback

from hybridrl.sweep.results import fmt_value, trial_row
from hybridrl.sweep.trial import TIME_ATTR, trial_console


def sampled_text(sampled: Mapping[str, Any], keys: list[str]) -> str:
    """`key=value, ...` in the sweep file's order of `keys` (the order of `compare`'s columns, not Tune's)."""
    ordered = [k for k in keys if k in sampled] + [k for k in sampled if k not in keys]
    return ", ".join(f"{k}={fmt_value(sampled[k])}" for k in ordered)


class ConsoleLines(Callback):
    """A Tune callback (runs in the sweep's driver) that logs a line when a trial starts, each time it reports the
    sweep's metric at a multiple of `every` steps (the validation steps), and when it ends: finished, stopped by
    the scheduler, or failed with the error its trial.json records."""

    def __init__(self, folder: str, keys: list[str], metric: str, mode: str, every: int,
                 log: Callable[[str], None] = print):
        self.folder, self.keys, self.metric, self.mode, self.every, self.log = folder, keys, metric, mode, every, log

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks into the sweep's state (a resumed sweep restores them): the console function
        # is this process's, so a restored callback prints
        return {k: v for k, v in self.__dict__.items() if k != "log"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, log=print)

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        self.log(f"trial {trial.trial_id} started: {sampled_text(trial.config, self.keys)}")

    def on_trial_result(self, iteration: int, trials: list, trial, result: Mapping[str, Any], **info) -> None:
        step = result.get(TIME_ATTR)
        if self.metric in result and self.every > 0 and isinstance(step, int) and step % self.every == 0:
            self.log(f"trial {trial.trial_id} step {step}: {self.metric}={fmt_value(result[self.metric])}")

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        row = trial_row(os.path.join(self.folder, trial.trial_id), self.metric, self.mode)
        # a trial's run writes "finished" before its last report; a scheduler's stop kills it before that
        how = "finished" if row.status == "finished" else "stopped by the scheduler"
        if row.status == "unknown":  # its trial.json is missing or damaged (results.trial_row)
            how = f"ended ({row.error})"
        self.log(f"trial {trial.trial_id} {how} at step {row.steps}: {self.metric}={fmt_value(row.final)} "
                 f"(best {fmt_value(row.best)})")

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        run_dir = os.path.join(self.folder, trial.trial_id)
        row = trial_row(run_dir, self.metric, self.mode)
        why = row.error if row.status == "error" and row.error else f"its traceback: {trial.error_file}"
        self.log(f"trial {trial.trial_id} error: {why}; its output: {trial_console(run_dir)}")
