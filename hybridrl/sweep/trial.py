"""One trial: an ordinary hybridrl run in `<sweep>/<trial_id>/`, built and fitted by trainer/launch.launch (the
path `hybridrl train` takes), reporting each logged step to Tune through a trainer callback.

Beside the run's own files the folder holds `trial.json`: the sampled values, the trial's status ("running",
"finished", or "error" with the config error or the error its run stopped on), which `hybridrl compare
SWEEP_DIR` reads, and the id of the Ray placement group Tune ran the trial in (with trainer.backend=ray its
workers run there too: RayRoles checks it).
A rerun of the same trial (a resumed sweep) resumes the run from its newest checkpoint (trainer.resume_mode=auto).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.library_logs import logs_dir, send_process_output_to
from hybridrl.sweep.check import load_trial_config
from hybridrl.sweep.spec import Base

TRIAL_FILE = "trial.json"
CONSOLE_LOG = "console.log"  # in the run's logs/: what the trial's run printed (`hybridrl train`'s console)
TIME_ATTR = "step"  # what the schedulers count: hybridrl steps, not Tune's reports (a resumed trial restarts those)


class TrialConfigError(ConfigError):
    """A trial's sampled config is invalid: the trial fails at once, the sweep goes on."""


class TrialRunError(HybridRLError):
    """A trial's run stopped on an error hybridrl names (a data file, a worker that died): recorded in trial.json
    for `compare`, and the sweep goes on."""


class TuneReport:
    """The trainer callback that hands every logged step's metrics to Tune (ASHA / median stop on them).

    The last step's metrics are held back until the run has ended (`report_last`): a scheduler stops a trial by
    killing its process, and a stop on the last report (ASHA's max_t) would otherwise cut the run's final
    checkpoint and its "finished" status."""

    def __init__(self, last_step: int):
        self.last_step = last_step
        self.held: dict[str, float] | None = None

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        from ray import tune

        if step == self.last_step:
            self.held = {**metrics, TIME_ATTR: step}
        else:
            tune.report({**metrics, TIME_ATTR: step})

    def report_last(self) -> None:
        from ray import tune

        if self.held is not None:
            tune.report(self.held)


def write_trial_file(run_dir: str, sampled: Mapping[str, Any], status: str, error: str | None = None,
                     node: str | None = None, placement_group: str | None = None) -> None:
    """`node`: the address of the Ray node the trial ran on (a sweep over a cluster spreads its trials);
    `placement_group`: the id of the trial's Ray placement group (a Ray-backend trial's workers run in it)."""
    os.makedirs(run_dir, exist_ok=True)
    tmp = os.path.join(run_dir, TRIAL_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"sampled": dict(sampled), "status": status, "error": error, "node": node,
                   "placement_group": placement_group}, f, indent=1)
    os.replace(tmp, os.path.join(run_dir, TRIAL_FILE))  # a kill never leaves half a file


def read_trial_file(run_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the trial's trial.json record, None), or (None, why there is none to read: missing, unreadable, or not a
    record of `sampled` and `status`, e.g. changed by hand)."""
    try:
        with open(os.path.join(run_dir, TRIAL_FILE), encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        return None, f"no {TRIAL_FILE}: the trial never started, or the file was removed"
    except (OSError, ValueError) as e:  # ValueError: bad JSON or bytes that are not UTF-8
        return None, f"{TRIAL_FILE}: unreadable ({e})"
    if isinstance(info, dict) and isinstance(info.get("sampled"), dict) and isinstance(info.get("status"), str):
        return info, None
    return None, f"{TRIAL_FILE}: not a trial record (sampled and status); the file was changed by hand"


def read_status(run_dir: str) -> str | None:
    """The trial's recorded status; None when there is none to read (a missing or damaged trial.json: the trial
    then runs again, from its run's own checkpoint, and writes the file anew)."""
    info, _ = read_trial_file(run_dir)
    return None if info is None else info["status"]


def trial_console(run_dir: str) -> str:
    return os.path.join(logs_dir(run_dir), CONSOLE_LOG)


def run_trial(sampled: dict[str, Any], base: Base, output: str, threads: int) -> None:
    """Tune's function trainable: `sampled` is the trial's {config key: value}; `threads`: its cores
    (sweep/resources.py). The process's output goes to the run's logs/console.log: trials side by side would
    interleave their lines on the sweep's console (sweep/console.py says what each trial does there)."""
    import ray
    from ray import tune

    run_dir = os.path.join(output, tune.get_context().get_trial_id())
    send_process_output_to(trial_console(run_dir))  # Tune may reuse this process for the next trial: it re-points
    if read_status(run_dir) == "finished":  # a resumed sweep whose state predates this trial's end: keep it as is
        return
    where = {"node": ray.util.get_node_ip_address(),
             # a trial with trainer.backend=ray: its workers' group too
             "placement_group": ray.get_runtime_context().get_placement_group_id()}
    write_trial_file(run_dir, sampled, "running", **where)
    try:
        run_plan = load_trial_config(base, sampled, run_dir)
    except ConfigError as e:  # before torch is imported: an invalid trial fails at once
        write_trial_file(run_dir, sampled, "error", str(e), **where)
        raise TrialConfigError(f"invalid sampled config {sampled}: {e}") from None
    import torch

    from hybridrl.trainer.callbacks import Callbacks
    from hybridrl.trainer.launch import launch

    torch.set_num_threads(threads)
    report = TuneReport(run_plan.config.trainer.total_training_steps)  # set: sweep/check.py requires it
    try:
        launch(run_plan, callbacks=Callbacks([report]))
    except HybridRLError as e:  # the error in the results, not only in Ray's error.txt (an interrupt is no error)
        write_trial_file(run_dir, sampled, "error", str(e), **where)
        raise TrialRunError(f"trial with {sampled}: {e}") from None
    write_trial_file(run_dir, sampled, "finished", **where)
    report.report_last()
