"""The sweep file's checks: each bad input gives its own message, naming the key and the fix, all at once."""

import os
import re

import pytest

from hybridrl.errors import ConfigError, ConfigErrors
from hybridrl.sweep.check import check_sweep, metric_warnings, output_problems
from hybridrl.sweep.spec import parse_sweep

pytestmark = pytest.mark.usefixtures("default_data_cwd")  # check_sweep looks for the base's data files

K, S = "trainer.test_freq", "space.trainer.test_freq"  # a key whose entries the tests get wrong
GOOD = {"space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-6, 3e-6]}},
        "metric": "val-core/arithmetic/reward/mean@1", "mode": "max", "output": "sweeps/x"}


def problems(**changes) -> list[str]:
    raw = {**GOOD, **changes}
    for key in [k for k, v in changes.items() if v is None]:
        del raw[key]
    with pytest.raises(ConfigErrors) as e:
        parse_sweep(raw)
    return e.value.messages


def test_a_good_file_parses_with_its_defaults():
    spec = parse_sweep(GOOD)
    assert (spec.search, spec.num_samples, spec.scheduler.name, spec.seed) == ("random", 1, "none", 0)
    assert [(e.key, e.kind, e.values) for e in spec.space] == [("actor_rollout_ref.actor.optim.lr", "grid",
                                                                 (1e-6, 3e-6))]


@pytest.mark.parametrize("changes, expected", [
    ({"metric": None}, "metric: missing; give the metric to optimise"),
    ({"output": None}, "output: missing; give the sweep folder"),
    ({"trials": 3}, "trials: not a sweep key; valid keys: base, space"),
    ({"mode": "maximum"}, "mode='maximum': not supported; valid values: max, min"),
    ({"search": "bayes"}, "search='bayes': not supported; valid values: random, grid, tpe"),
    ({"num_samples": 0}, "num_samples=0: give an integer >= 1"),
    ({"max_concurrent": 0}, "max_concurrent=0: give an integer >= 1"),
    ({"scheduler": "hyperband"}, "scheduler: got 'hyperband'; give one of none, asha, median"),
    ({"scheduler": {"name": "asha", "grace": 1}}, "scheduler.grace: not a parameter of asha; valid: grace_period, "
                                                   "reduction_factor, max_t"),
    ({"scheduler": {"name": "asha", "reduction_factor": 1}}, "scheduler.reduction_factor=1: give a number > 1"),
    ({"scheduler": {"name": "median", "grace_period": 1.5}}, "scheduler.grace_period=1.5: give an integer >= 0 "
                                                             "(hybridrl steps)"),
    ({"space": {}}, "space: got {}; give a mapping of at least one config key"),
    ({"space": {K: {"normal": [0, 1]}}}, f"{S}: got ['normal']; give exactly one of choice, grid, uniform"),
    ({"space": {K: {"grid": []}}}, f"{S}.grid: got []; give a non-empty list"),
    ({"space": {K: {"uniform": [1, 0]}}}, f"{S}.uniform: [1, 0]: lo=1 must be below hi=0"),
    ({"space": {K: {"loguniform": [0, 1e-3]}}}, f"{S}.loguniform: [0, 0.001]: lo=0: a log-uniform range needs 0 < lo"),
    ({"space": {K: {"randint": [1, 2.5]}}}, f"{S}.randint: [1, 2.5]: give two integers [lo, hi]"),
    ({"space": {K: {"uniform": [float("nan"), 1]}}}, f"{S}.uniform: [nan, 1]: give two finite numbers [lo, hi]"),
    ({"space": {K: {"loguniform": [1e-5, float("inf")]}}}, f"{S}.loguniform: [1e-05, inf]: give two finite numbers"),
    ({"space": {K: {"grid": [1e-4, 2e-4, 1e-4]}}},  # a second identical trial (and 1 == 1.0 to the config)
     f"{S}.grid: [0.0001, 0.0002, 0.0001]: lists 0.0001 more than once; list each value once"),
    ({"space": {K: {"grid": [1, 1.0, 2]}}}, f"{S}.grid: [1, 1.0, 2]: lists 1 more than once"),
    ({"space": {K: {"choice": [1, 2]}}, "search": "grid"}, f"{S}: choice under search=grid; give it as grid"),
    ({"space": {"trainer.default_local_dir": {"grid": ["a"]}}}, "space.trainer.default_local_dir: the sweep sets it"),
    ({"base": {"overrides": ["actor_rollout_ref.actor.optim.lr=1e-6"]}},
     "space.actor_rollout_ref.actor.optim.lr: also set in base.overrides; give it in one place"),
    ({"base": {"config": "/no/such.yaml"}}, "base.config='/no/such.yaml': file not found"),
    ({"base": {"overrides": "a=1"}}, "base.overrides: got 'a=1'; give a list of key=value strings or a mapping"),
])
def test_each_bad_input_has_its_message(changes, expected):
    found = problems(**changes)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_tpe_without_optuna_says_to_install_it(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec  # optuna is in the lock: hide it, as on a machine without it
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else find_spec(name, *a))
    assert problems(search="tpe", space={"trainer.test_freq": {"choice": [1, 2]}}) == [
        "search=tpe needs Optuna, which is not installed; pip install 'hybridrl[tpe]', or use search=random"]


def test_tpe_uses_optunas_searcher():
    pytest.importorskip("optuna")
    from hybridrl.sweep.driver import _searcher
    from hybridrl.sweep.tpe import ReportedOptunaSearch

    spec = parse_sweep({**GOOD, "space": {"trainer.test_freq": {"choice": [1, 2]}}, "search": "tpe"})
    assert isinstance(_searcher(spec, 2), ReportedOptunaSearch)


def test_tpe_is_told_the_validated_metric_of_trials_that_report_it_every_few_steps():
    """A trial reports every step; the validation metric comes every test_freq steps. Tune's OptunaSearch stopped
    the sweep on the first report without it (KeyError) and told Optuna 'pruned' when the last one lacked it."""
    pytest.importorskip("optuna")
    from optuna.trial import TrialState
    from ray import tune

    from hybridrl.sweep.tpe import ReportedOptunaSearch

    metric = GOOD["metric"]
    search = ReportedOptunaSearch(space={"lr": tune.loguniform(1e-5, 1e-3)}, metric=metric, mode="max", seed=0)
    for trial_id, validated in (("a", {2: 0.4, 4: 0.55}), ("b", {2: 0.3})):  # b: stopped at step 3, say
        assert 1e-5 <= search.suggest(trial_id)["lr"] <= 1e-3
        last = {}
        for step in range(1, 4 if trial_id == "b" else 5):
            last = {"step": step, "training_iteration": step, "critic/score/mean": 0.1 * step,
                    **({metric: validated[step]} if step in validated else {})}
            search.on_trial_result(trial_id, last)
        search.on_trial_complete(trial_id, last)
    told = [(t.state, t.value, t.intermediate_values) for t in search._ot_study.trials]
    assert told == [(TrialState.COMPLETE, 0.55, {2: 0.4, 4: 0.55}), (TrialState.COMPLETE, 0.3, {2: 0.3})]
    assert search.suggest("c") is not None  # TPE goes on from what it was told


def test_tpe_hears_a_resumed_trial_at_hybridrls_steps_quietly(recwarn):
    """A resumed sweep reruns a cut trial from its run's checkpoint: Tune's training_iteration restarts at 1, the
    hybridrl step goes on. Optuna is told the steps (a step redone after the checkpoint is told twice: dropped,
    without Optuna's warning on the sweep's console)."""
    pytest.importorskip("optuna")
    from ray import tune

    from hybridrl.sweep.tpe import ReportedOptunaSearch

    metric = GOOD["metric"]
    search = ReportedOptunaSearch(space={"lr": tune.loguniform(1e-5, 1e-3)}, metric=metric, mode="max", seed=0)
    search.suggest("a")
    for iteration, step, value in ((1, 2, 0.25), (2, 4, 0.5), (3, 6, 0.625),  # killed after step 6 ...
                                   (1, 6, 0.625), (2, 8, 0.75)):  # ... resumed from the checkpoint of step 4
        search.on_trial_result("a", {"step": step, "training_iteration": iteration, metric: value})
    search.on_trial_complete("a", {"step": 8, "training_iteration": 2, metric: 0.75})
    (told,) = search._ot_study.trials
    assert told.intermediate_values == {2: 0.25, 4: 0.5, 6: 0.625, 8: 0.75} and told.value == 0.75
    assert [str(w.message) for w in recwarn] == []


def test_grid_entries_are_refused_under_tpe():
    found = [m for m in problems(search="tpe") if not m.startswith("search=tpe needs Optuna")]
    assert found == ["space.actor_rollout_ref.actor.optim.lr: grid under search=tpe; TPE samples every key, give it "
                     "as choice: [...]"]


def test_every_problem_is_reported_at_once():
    found = problems(mode="up", num_samples=-1, search="x")
    assert [m.split("=")[0] for m in found] == ["search", "mode", "num_samples"]


def test_an_unknown_config_key_in_the_space_is_refused_by_the_train_validation():
    with pytest.raises(ConfigErrors) as e:  # with the file's other problems, before any config is built
        parse_sweep({**GOOD, "mode": "up", "space": {"actor_rollout_ref.actor.optim.lrr": {"grid": [1e-6]},
                                                     "trainer.tes_freq": {"choice": [1]}}})
    assert e.value.messages == [
        "space.actor_rollout_ref.actor.optim.lrr: config: unknown key 'actor_rollout_ref.actor.optim.lrr'; did you "
        "mean 'actor_rollout_ref.actor.optim.lr'? (--help lists every key)",
        "space.trainer.tes_freq: config: unknown key 'trainer.tes_freq'; did you mean 'trainer.test_freq'? (--help "
        "lists every key)",
        "mode='up': not supported; valid values: max, min"]


def test_the_base_is_checked_with_the_swept_keys_first_values():
    # alone the base's mini-batch (default 32) exceeds its 8 prompts; the space's first value (4) makes it valid
    batch = {"base": {"overrides": {"data.train_batch_size": 8}}}
    spec = parse_sweep({**GOOD, **batch, "space": {"actor_rollout_ref.actor.ppo_mini_batch_size": {"grid": [4, 3]}}})
    cfg, _ = check_sweep(spec, log=lambda _: None)
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 4
    bad = parse_sweep({**GOOD, **batch, "space": {"actor_rollout_ref.actor.ppo_mini_batch_size": {"grid": [3, 4]}}})
    with pytest.raises(ConfigErrors) as e:
        check_sweep(bad)
    assert e.value.messages[0].startswith("base (with actor_rollout_ref.actor.ppo_mini_batch_size=3, each swept key's "
                                          "first value): actor_rollout_ref.actor.ppo_mini_batch_size=3 does not divide")


def test_a_base_without_the_file_logger_is_refused():
    spec = parse_sweep({**GOOD, "base": {"overrides": ["trainer.logger=[console]"]}})
    with pytest.raises(ConfigErrors, match=r"trainer.logger=\['console'\] has no 'file'; a sweep reads"):
        check_sweep(spec)


def test_unknown_or_never_reported_metrics_are_warned_about():
    spec = parse_sweep({**GOOD, "metric": "accuracy", "base": {"overrides": {"trainer.test_freq": -1}}})
    lines = []
    cfg, _ = check_sweep(spec, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("warning: metric='accuracy' is not a name hybridrl logs")
    assert metric_warnings("critic/score/mean", cfg) == []
    assert metric_warnings("val-core/arithmetic/reward/mean@1", cfg) == [
        "metric='val-core/arithmetic/reward/mean@1' is a validation metric and trainer.test_freq=-1: trials never "
        "report it after step 0; set trainer.test_freq in base.overrides"]


def test_the_schedulers_count_hybridrl_steps_on_the_sweeps_metric():
    pytest.importorskip("ray")
    from hybridrl.sweep.driver import _scheduler

    asha = _scheduler(parse_sweep({**GOOD, "scheduler": {"name": "asha", "grace_period": 2, "reduction_factor": 3}}), 9)
    assert (asha._time_attr, asha._max_t, asha._brackets[0]._rungs[-1][0]) == ("step", 9, 2)  # first rung at step 2
    assert asha._brackets[0].rf == 3
    median = _scheduler(parse_sweep({**GOOD, "scheduler": "median"}), 9)
    assert (median._time_attr, median._grace_period) == ("step", 1)


def test_asha_runs_to_the_most_steps_a_trial_takes():
    pytest.importorskip("ray")
    from hybridrl.sweep.driver import most_steps

    assert most_steps(parse_sweep(GOOD), 7) == 7  # the base's trainer.total_training_steps
    swept = {**GOOD, "space": {"trainer.total_training_steps": {"grid": [4, 12, 8]}}}
    assert most_steps(parse_sweep(swept), 7) == 12
    assert most_steps(parse_sweep({**swept, "space": {"trainer.total_training_steps": {"randint": [2, 9]}}}), 7) == 9


def test_a_base_without_a_step_count_is_refused():
    spec = parse_sweep({**GOOD, "base": {"overrides": {"trainer.total_training_steps": None}}})
    with pytest.raises(ConfigErrors, match="trainer.total_training_steps is null; a sweep counts each trial's steps"):
        check_sweep(spec)


def test_missing_base_data_is_refused_before_any_trial_and_a_swept_data_key_is_left_to_its_trials(tmp_path):
    """Every trial would fail on it, each after its own start-up (a sweep file run where `make data` was not)."""
    missing = str(tmp_path / "nowhere" / "val.parquet")
    spec = parse_sweep({**GOOD, "base": {"overrides": {"data.val_files": [missing]}}})
    with pytest.raises(ConfigErrors) as e:
        check_sweep(spec)
    assert e.value.messages == [f"base: data.val_files: file not found: {missing}"]
    (tmp_path / "data" / "arithmetic").unlink()  # the default train file too, with the arithmetic hint
    with pytest.raises(ConfigErrors) as e:
        check_sweep(spec)
    assert e.value.messages[0] == ("base: data.train_files: file not found: data/arithmetic/train.parquet (create it "
                                   "with `hybridrl data arithmetic --output data/arithmetic`)")
    swept = parse_sweep({**GOOD, "space": {"data.val_files": {"choice": [[missing]]}},
                         "base": {"overrides": {"data.train_files": [str(tmp_path / "t.parquet")]}}})
    with pytest.raises(ConfigErrors) as e:
        check_sweep(swept)
    assert [m.split(":")[0] for m in e.value.messages] == ["base"] and "data.train_files" in e.value.messages[0]


def test_an_output_that_cannot_hold_the_sweep_is_refused_before_any_trial(tmp_path):
    """A file, a folder of other things, a path under a file: each refused naming `output` (it was a
    FileExistsError traceback once Ray had started); a new folder, an empty one and a sweep's own folder pass."""
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_run").mkdir()
    (tmp_path / "a_run" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "a_sweep").mkdir()
    (tmp_path / "a_sweep" / "sweep.yaml").write_text("{}\n")
    (tmp_path / "empty").mkdir()
    # a sweep stopped before it wrote sweep.yaml (Ray did not start) leaves the log of Ray's notes: still its own
    (tmp_path / "cut_early" / "logs").mkdir(parents=True)
    (tmp_path / "cut_early" / "logs" / "driver.log").write_text("ray WARNING: Token authentication ...\n")
    refused = {"a_file": "is a file, not a folder", "a_run": "a folder that holds other files, not a sweep's",
               "a_file/sub": f"{tmp_path / 'a_file'} is a file, not a folder"}
    for output, says in refused.items():
        with pytest.raises(ConfigErrors) as e:
            check_sweep(parse_sweep({**GOOD, "output": str(tmp_path / output)}), log=lambda _: None)
        assert e.value.messages == [f"output={str(tmp_path / output)!r}: {says}" + e.value.messages[0].split(says)[1]]
    for output in ("new/deeper", "empty", "a_sweep", "cut_early"):
        check_sweep(parse_sweep({**GOOD, "output": str(tmp_path / output)}), log=lambda _: None)


def test_a_validation_reward_name_that_is_never_logged_is_warned_about_with_the_names_that_are():
    spec = parse_sweep({**GOOD, "metric": "val-core/arithmetic/reward/mean"})  # the sample count left out
    lines = []
    cfg, _ = check_sweep(spec, log=lines.append)
    assert lines == ["warning: metric='val-core/arithmetic/reward/mean' is never logged: with "
                     "actor_rollout_ref.rollout.val_kwargs.n=1, validation logs val-core/arithmetic/reward/ mean@1, "
                     "std@1; did you mean val-core/arithmetic/reward/mean@1?"]
    sampled = {f"actor_rollout_ref.rollout.val_kwargs.{k}": v for k, v in (("n", 4), ("do_sample", True),
                                                                            ("temperature", 1.0))}
    four = check_sweep(parse_sweep({**GOOD, "base": {"overrides": sampled},
                                    "metric": "val-core/arithmetic/reward/pass@4"}), log=lines.append)[0]
    assert len(lines) == 1  # pass@4 is logged with 4 samples
    assert metric_warnings("val-core/arithmetic/reward/pass@3", four)[0].endswith(
        "validation logs val-core/arithmetic/reward/ mean@4, std@4, best@1, best@2, best@4, worst@1, worst@2, worst@4, "
        "pass@1, pass@2, pass@4, maj@1, maj@2, maj@4; did you mean val-core/arithmetic/reward/mean@4?")
    assert metric_warnings("val-core/my_extra", four) == []  # a callback's own val-core name: not the reward's


def test_a_second_sweep_of_a_folder_in_use_is_refused_before_ray_starts(tmp_path):
    """Two drivers on one sweep folder (the same command run twice) would both run its trials; the second one
    is refused, naming output, and the folder is its own again once the first lets go."""
    import ray

    from hybridrl.sweep.driver import run_sweep
    from hybridrl.trainer.runlock import RunLock

    out = str(tmp_path / "out")
    first = RunLock(out, key="output")  # what the running sweep holds
    with pytest.raises(ConfigError, match=re.escape(f"output={out!r} is in use by another run (PID {os.getpid()}")):
        run_sweep(parse_sweep({**GOOD, "output": out}), log=lambda _: None)
    assert not ray.is_initialized()
    first.release()
    assert output_problems(out) == []  # the lock file alone does not make it 'a folder of other things'
