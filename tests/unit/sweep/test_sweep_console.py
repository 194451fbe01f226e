"""sweep/console.ConsoleLines: the sweep's console lines, from Tune's trial events and the trials' folders (a
folder written by hand, sweep_folder.py); Tune's Trial stood in for by its two attributes the callback reads."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.tune")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_folder import ADV, CLIP, LR, M, SPACE, TRIALS, write_sweep  # noqa: E402

from hybridrl.sweep.console import ConsoleLines  # noqa: E402


@pytest.fixture
def lines(tmp_path):
    folder = write_sweep(tmp_path / "sweep")
    said: list[str] = []
    return folder, ConsoleLines(folder, list(SPACE), M, "max", every=2, log=said.append), said


def trial(name: str):
    return SimpleNamespace(trial_id=name, config=TRIALS[name][0], error_file=f"/ray/artifacts/{name}/error.txt")


def test_a_start_names_the_sampled_values_in_the_sweep_files_order(lines):
    _, console, said = lines
    shuffled = SimpleNamespace(trial_id="t_00000", config={CLIP: 0.2, "other": 1, LR: 1e-4, ADV: "grpo"})
    console.on_trial_start(0, [], shuffled)  # Tune's own order; a key the space does not name goes last
    assert said == [f"trial t_00000 started: {LR}=0.0001, {ADV}=grpo, {CLIP}=0.2, other=1"]


def test_results_are_shown_at_validation_steps_only_and_when_they_carry_the_metric(lines):
    _, console, said = lines
    for result in ({M: 0.5, "step": 2}, {M: 0.25, "step": 3}, {"critic/score/mean": 0.1, "step": 4},
                   {M: 0.125, "step": 4}):
        console.on_trial_result(0, [], trial("t_00000"), result)
    assert said == [f"trial t_00000 step 2: {M}=0.5", f"trial t_00000 step 4: {M}=0.125"]


def test_no_result_lines_when_the_run_never_validates(tmp_path):
    said: list[str] = []
    console = ConsoleLines(str(tmp_path), list(SPACE), M, "max", every=-1, log=said.append)
    console.on_trial_result(0, [], trial("t_00000"), {M: 0.5, "step": 2})
    assert said == []


def test_an_end_says_finished_or_stopped_with_the_final_and_best_value(lines):
    _, console, said = lines
    console.on_trial_complete(0, [], trial("t_00001"))  # finished: 0.3, 0.4, 0.7
    console.on_trial_complete(0, [], trial("t_00002"))  # its trial.json says running: a scheduler stopped it
    assert said == [f"trial t_00001 finished at step 2: {M}=0.7 (best 0.7)",
                    f"trial t_00002 stopped by the scheduler at step 1: {M}=0.1 (best 0.3)"]


def test_an_end_whose_record_is_damaged_says_why(lines):
    folder, console, said = lines
    with open(os.path.join(folder, "t_00000", "trial.json"), "w") as f:
        f.write("{not json")
    console.on_trial_complete(0, [], trial("t_00000"))
    assert said[0].startswith("trial t_00000 ended (trial.json: unreadable (") and said[0].endswith(
        f": {M}=0.5 (best 0.6)")


def test_an_error_gives_the_recorded_message_or_tunes_error_file_and_the_trials_output(lines):
    folder, console, said = lines
    console.on_trial_error(0, [], trial("t_00003"))  # trial.json has the refused config's message
    console.on_trial_error(0, [], trial("t_00001"))  # no message recorded (a crash hybridrl did not name)
    log = lambda name: os.path.join(folder, name, "logs", "console.log")  # noqa: E731
    assert said == [f"trial t_00003 error: actor_rollout_ref.actor.optim.lr: ...; its output: {log('t_00003')}",
                    f"trial t_00001 error: its traceback: /ray/artifacts/t_00001/error.txt; its output: "
                    f"{log('t_00001')}"]


def test_a_pickled_callback_prints_in_the_process_that_restores_it(lines):
    # Tune pickles its callbacks with the sweep's state; the driver's log function (a lambda in tests) is not
    # pickled, and a resumed sweep's restored callback prints
    folder, console, _ = lines
    restored = pickle.loads(pickle.dumps(console))
    assert restored.log is print and (restored.folder, restored.metric, restored.every) == (folder, M, 2)
