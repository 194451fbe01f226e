"""search=tpe: Optuna's TPE through Ray Tune's OptunaSearch, told what hybridrl's trials report.

A trial reports every logged step to Tune (sweep/trial.py), and the sweep's metric, usually a validation one, is in
the reports of the steps that validate only (every trainer.test_freq). Tune's OptunaSearch reads the metric from
every report: the first step without it stopped the whole sweep on a KeyError. And it tells Optuna the metric of
the trial's last report: a trial whose last step did not validate was told as pruned, so TPE learned nothing from
it. Here Optuna gets the metric as it comes (its intermediate values, at hybridrl's steps) and, at a trial's end,
the last value that trial reported, as Tune tells it when the last step does validate.

Imported only for search=tpe: it needs optuna (sweep/spec.py refuses tpe without it).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

from ray.tune.result import TRAINING_ITERATION
from ray.tune.search.optuna import OptunaSearch

from hybridrl.sweep.trial import TIME_ATTR


class ReportedOptunaSearch(OptunaSearch):
    """OptunaSearch over reports that carry the metric only at some steps."""

    def __init__(self, **kwargs: Any):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line among hybridrl's
        super().__init__(**kwargs)
        self.last_value: dict[str, float] = {}  # trial id -> the metric's last reported value (saved with the rest)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.metric in result:
            self.last_value[trial_id] = result[self.metric]
            # Optuna's step is the hybridrl step, not Tune's report count: that restarts at 1 when a resumed sweep
            # reruns a cut trial from its run's checkpoint, and Optuna drops (with a warning on the console) a step
            # it was told before. A step redone after a resume (told before the kill, after the last checkpoint)
            # has the value it had (resume is exact); dropping it is right, and quiet.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The reported value is ignored because this `step=")
                super().on_trial_result(trial_id, {**result, TRAINING_ITERATION: result[TIME_ATTR]})

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        if result is not None and self.metric not in result and trial_id in self.last_value:
            result = {**result, self.metric: self.last_value[trial_id]}
        super().on_trial_complete(trial_id, result, error)
