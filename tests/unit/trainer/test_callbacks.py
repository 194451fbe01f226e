"""trainer/callbacks.py: which hooks a callback has, the extra validation metrics' names, and errors that
name the callback."""

from __future__ import annotations

import math

import pytest

from hybridrl.errors import ConfigError
from hybridrl.trainer.callbacks import Callback, CallbackError, Callbacks


class Recorder(Callback):
    def __init__(self):
        self.calls = []

    def on_step_end(self, step, metrics):
        self.calls.append(("step_end", step, dict(metrics)))

    def on_save(self, step, path):
        self.calls.append(("save", step, path))


def test_objects_and_functions_named_after_a_hook_are_called_in_order():
    rec, seen = Recorder(), []

    def on_step_end(step, metrics):
        seen.append(step)

    hooks = Callbacks([rec, on_step_end])
    hooks.step_end(3, {"a": 1.0})
    hooks.save(3, "/run/global_step_3")
    assert rec.calls == [("step_end", 3, {"a": 1.0}), ("save", 3, "/run/global_step_3")] and seen == [3]
    assert hooks.validation(3, {}) == {}  # the base class's on_validation returns nothing


def test_extra_validation_metrics_are_named_like_verls_evaluator():
    class Extra:
        def on_validation(self, step, metrics):
            return {"judge": metrics["val-core/a/reward/mean@1"] / 2, "val-aux/kept": 1}

    def on_validation(step, metrics):
        return None

    assert Callbacks([Extra(), on_validation]).validation(2, {"val-core/a/reward/mean@1": 0.5}) == {
        "val-core/judge": 0.25, "val-aux/kept": 1.0}


def test_a_callback_without_a_hook_is_refused_by_name():
    def after_step(step, metrics):
        pass

    with pytest.raises(ConfigError, match="callback 'test_a_callback_without_a_hook_is_refused_by_name.<locals>."
                                          "after_step' has none of the hooks on_step_end, on_validation, on_save"):
        Callbacks([after_step])


def test_a_callback_that_raises_fails_with_its_name_and_step():
    class Broken(Callback):
        def on_save(self, step, path):
            raise RuntimeError("disk full")

    with pytest.raises(CallbackError, match=r"callback .*Broken.on_save failed at step 4: RuntimeError: disk full "
                                            r"\(at .*test_callbacks.py:\d+\)") as e:
        Callbacks([Broken()]).save(4, "p")
    assert isinstance(e.value.__cause__, RuntimeError)  # the traceback stays reachable


@pytest.mark.parametrize("returned, message", [
    ([1.0], r"returned list; return a dict of \{name: number\}"),
    ({"x": math.nan}, r"returned x=nan; each metric must be a finite number"),
    ({"x": "high"}, r"returned x='high'; each metric must be a finite number"),
    ({"a/reward/mean@1": 1.0}, r"returned 'a/reward/mean@1', but val-core/a/reward/mean@1 is already logged"),
])
def test_metrics_that_cannot_be_logged_are_refused(returned, message):
    def on_validation(step, metrics):
        return returned

    with pytest.raises(CallbackError, match=message):
        Callbacks([on_validation]).validation(1, {"val-core/a/reward/mean@1": 0.0})
