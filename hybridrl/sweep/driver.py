"""`hybridrl sweep SWEEP_FILE`: check the sweep, derive its concurrency, and run its trials with Ray Tune; the
same command again resumes an interrupted sweep from its folder (Tune's experiment state).

The sweep folder is Tune's experiment folder: Tune's state files, `sweep.yaml` (the sweep file as read) and one
run folder per trial, named by the trial id (Tune's trial folder and the run's trainer.default_local_dir).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from hybridrl.distributed.cluster import init_ray
from hybridrl.errors import ConfigError, raise_all
from hybridrl.interrupt import Interrupted, interrupted_message, stopping
from hybridrl.library_logs import adopt_logger, driver_log, route_library_logging
from hybridrl.sweep import resources
from hybridrl.sweep.check import check_sweep, load_trial_config, output_problems
from hybridrl.sweep.space import grid_size
from hybridrl.sweep.spec import SWEEP_FILE, SweepSpec  # the file marks the folder as a sweep's, pins its definition
from hybridrl.sweep.trial import TIME_ATTR, run_trial, trial_console

STEPS = "trainer.total_training_steps"


def derive(spec: SweepSpec, log: Callable[[str], None]) -> tuple[resources.Concurrency, Any, resources.TrialNeeds]:
    """(concurrency on this machine, the base config checked by check_sweep, a trial's largest need). The need is
    the largest over the swept values, one key at a time, the others at their first value: every value of a list,
    both ends of a range (plan/memory.py estimates each; an invalid value is left to its trial to report)."""
    cfg, plan = check_sweep(spec, log)
    needs = [resources.trial_needs(cfg, plan)]
    probe = {e.key: e.probe() for e in spec.space}
    for e in spec.space:
        for value in e.values[1:]:
            try:
                trial = load_trial_config(spec.base, {**probe, e.key: value})
                needs.append(resources.trial_needs(trial.config, trial.batch))
            except ConfigError:
                continue
    need = resources.largest_needs(needs)
    return concurrency_on(spec, need, resources.this_machine()), cfg, need


def concurrency_on(spec: SweepSpec, need: resources.TrialNeeds, machine: resources.Machine) -> resources.Concurrency:
    """How many trials of `need` run at once on `machine` (this one, or a joined cluster: resources.cluster_machine);
    a ConfigError when none fits."""
    trials = grid_size(spec.space) * spec.num_samples  # Tune's count: num_samples passes over the grid entries
    got = resources.derive_concurrency(need, machine, trials, spec.max_concurrent)
    if got.trials < 1:
        raise ConfigError(f"no trial fits on this machine: {got.why}; lower the memory a trial needs (hybridrl plan "
                          "shows the estimate) or run on a larger machine")
    return got


def most_steps(spec: SweepSpec, base_steps: int) -> int:
    """The most steps a trial runs (ASHA's max_t): the base's, or the largest swept trainer.total_training_steps."""
    swept = [max(e.values) for e in spec.space if e.key == STEPS]  # a range's [lo, hi] too: hi
    return swept[0] if swept else base_steps


def _scheduler(spec: SweepSpec, max_t: int):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    p = dict(spec.scheduler.params)
    if spec.scheduler.name == "asha":
        return ASHAScheduler(time_attr=TIME_ATTR, max_t=p.pop("max_t", max_t), **p)
    if spec.scheduler.name == "median":
        return MedianStoppingRule(time_attr=TIME_ATTR, **{"grace_period": 1, **p})
    return FIFOScheduler()


def _searcher(spec: SweepSpec, concurrency: int):
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if spec.search == "tpe":
        from hybridrl.sweep.tpe import ReportedOptunaSearch  # needs optuna (sweep/spec.py checked)

        return ReportedOptunaSearch(seed=spec.seed)
    return BasicVariantGenerator(random_state=spec.seed, max_concurrent=concurrency)


def _write_sweep_file(spec: SweepSpec, folder: str) -> None:
    import yaml

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, SWEEP_FILE), "w", encoding="utf-8") as f:
        yaml.safe_dump(spec.source, f, sort_keys=False)


def _tuner(spec: SweepSpec, folder: str, trainable, concurrency: int, resume: bool, max_t: int, test_freq: int,
           log: Callable[[str], None]):
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    from hybridrl.sweep.console import ConsoleLines

    if resume:
        return tune.Tuner.restore(folder, trainable, resume_unfinished=True, resume_errored=False)
    from hybridrl.sweep.space import to_tune

    return tune.Tuner(
        trainable, param_space=to_tune(spec.space),
        tune_config=tune.TuneConfig(metric=spec.metric, mode=spec.mode, num_samples=spec.num_samples,
                                    search_alg=_searcher(spec, concurrency), scheduler=_scheduler(spec, max_t),
                                    # the random/grid generator takes the bound itself (above); a Searcher here
                                    max_concurrent_trials=concurrency if spec.search == "tpe" else None,
                                    trial_dirname_creator=lambda trial: trial.trial_id,
                                    trial_name_creator=lambda trial: trial.trial_id),
        # verbose=0: no status tables; the console has ConsoleLines' line per trial event instead
        run_config=tune.RunConfig(name=os.path.basename(folder), storage_path=os.path.dirname(folder), verbose=0,
                                  # result.json / progress.csv: what Tune's own results read; no TensorBoard copy
                                  callbacks=[JsonLoggerCallback(), CSVLoggerCallback(),
                                             ConsoleLines(folder, [e.key for e in spec.space], spec.metric, spec.mode,
                                                          test_freq, log)],
                                  failure_config=tune.FailureConfig(max_failures=0, fail_fast=False)))


def _resuming(spec: SweepSpec, folder: str, must_resume: bool) -> bool:
    """Whether `folder` holds this sweep to resume; a different sweep there, or --resume with none, is refused."""
    from ray import tune

    from hybridrl.sweep.spec import read_yaml

    if not tune.Tuner.can_restore(folder):
        if must_resume:
            raise ConfigError(f"--resume: {folder} holds no sweep to resume; run without --resume to start it")
        return False
    mine = os.path.join(folder, SWEEP_FILE)
    if not os.path.isfile(mine) or read_yaml(mine) != spec.source:
        raise ConfigError(f"output={spec.output!r} holds another sweep (its definition is {mine}); give this sweep "
                          "another output folder, or run that sweep's file to resume it")
    return True


def run_sweep(spec: SweepSpec, must_resume: bool = False, log: Callable[[str], None] = print) -> Any:
    """Run the sweep, or resume it when its folder holds it already (`must_resume`: only resume); Tune's
    ResultGrid."""
    from hybridrl.trainer.runlock import RunLock

    folder = os.path.abspath(spec.output)
    raise_all(output_problems(spec.output))  # before the lock makes the folder
    # one sweep per folder: a second `hybridrl sweep` of it (a resume while it runs) would rerun its live trials
    lock = RunLock(folder, key="output", log=log)
    try:
        return _run_locked(spec, folder, must_resume, log)
    finally:
        lock.release()


def _run_locked(spec: SweepSpec, folder: str, must_resume: bool, log: Callable[[str], None]) -> Any:
    import ray

    resume = _resuming(spec, folder, must_resume)
    got, cfg, need = derive(spec, log)
    address = cfg.ray_kwargs.ray_init.address
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"  # validation metrics come every test_freq steps only
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"  # relative paths (data, configs) mean what they mean here
    # Ctrl-C stops the sweep as it stops any hybridrl command (one line, exit 130), not Tune's way (exit 0)
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"  # Tune's JSON and CSV loggers are given below; no TBX
    # Tune's output engine prints its experiment box and each failed trial even at verbose=0; the legacy one at
    # verbose=0 prints nothing (the console is sweep/console.py's lines)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # Ray's notes (token auth, ...) and Tune's log records to <sweep>/logs/driver.log; Tune's ERROR record of a
    # failed trial is a traceback, and ConsoleLines says it in a line
    route_library_logging(folder, file_only=("ray.tune", "ray.train", "ray.air"))
    adopt_logger("ray")
    started = not ray.is_initialized()
    if started:
        _start_ray(address, log)
    try:
        machine = resources.this_machine()
        if address is not None:  # the trials go to every node: the cluster's cores bound them, not this machine's
            machine = resources.cluster_machine()
            got = concurrency_on(spec, need, machine)
        log(f"concurrency: {got.why}")
        return _fit(spec, folder, cfg, got, machine, resume, log)
    finally:
        if started:  # the trials' processes go with it
            ray.shutdown()


def _start_ray(address: str | None, log: Callable[[str], None]) -> None:
    """Join the cluster the base config names (ray_kwargs.ray_init.address: its trials go to every node), or
    start a Ray instance of this sweep's own (address="local"), never one another job on this machine started."""
    import ray

    # log_to_driver=False: the trials' output is in their run folders (sweep/trial.py), not interleaved here
    if address is None:
        init_ray("local", num_cpus=resources.this_machine().cores, log_to_driver=False)
        return
    init_ray(address, log_to_driver=False)
    log(f"joined the Ray cluster at {address}: {sum(n['Alive'] for n in ray.nodes())} node(s), "  # not the dead
        f"{ray.cluster_resources().get('CPU', 0):g} CPUs")


def _trial_resources(spec: SweepSpec, cfg, threads: int):
    """What Tune reserves for a trial: `threads` cores (and a GPU on cuda) for an in-process trial; for a Ray-backend
    trial a placement group of its bundles (sweep/resources.trial_bundles), from the trial's own config (a swept
    key may change its workers); a trial whose config is invalid gets the base's and fails at once in run_trial."""
    from ray import tune

    if cfg.trainer.backend != "ray":
        return {"cpu": threads, "gpu": int(cfg.trainer.device == "cuda")}

    def bundles(sampled: dict[str, Any]):
        try:
            trial_cfg = load_trial_config(spec.base, sampled).config
        except ConfigError:
            trial_cfg = cfg
        # PACK: a trial's processes on as few nodes as fit (one, on this machine); Ray reserves them all at once
        return tune.PlacementGroupFactory(resources.trial_bundles(trial_cfg), strategy="PACK")

    return bundles


def _fit(spec: SweepSpec, folder: str, cfg, got: resources.Concurrency, machine: resources.Machine, resume: bool,
         log: Callable[[str], None]):
    from ray import tune

    max_t = most_steps(spec, cfg.trainer.total_training_steps)
    ray_trials = cfg.trainer.backend == "ray"
    threads = 1 if ray_trials else got.threads(machine)  # ray: each process has its bundle's core
    if ray_trials:
        log(f"each trial: a placement group of {len(resources.trial_bundles(cfg))} bundles (its driver and its "
            "workers, 1 CPU core each" + ", 1 GPU per worker" * (cfg.trainer.device == "cuda") + ")")
    else:
        log(f"each trial: {threads} CPU core(s) for its torch threads{', 1 GPU' * (cfg.trainer.device == 'cuda')}")
    trainable = tune.with_resources(tune.with_parameters(run_trial, base=spec.base, output=folder, threads=threads),
                                    _trial_resources(spec, cfg, threads))
    log(f"each trial's output: {trial_console(os.path.join(folder, '<trial>'))}; Ray's and Tune's notes: "
        f"{driver_log(folder)}")
    if resume:
        log(f"resuming the sweep in {folder}: finished trials are kept, unfinished ones resume from their checkpoints")
    else:
        _write_sweep_file(spec, folder)
    try:
        results = _tuner(spec, folder, trainable, got.trials, resume, max_t, cfg.trainer.test_freq, log).fit()
    except BaseException:
        if not stopping():  # not Ctrl-C / SIGTERM (hybridrl/interrupt.py), which Ray may have turned into its own error
            raise
        raise Interrupted(f"{interrupted_message()}; run the same command to resume the sweep in {folder} (unfinished "
                          "trials from their newest checkpoints)") from None
    log(f"{len(results)} trials, {results.num_errors} failed; sweep folder {folder}: `hybridrl compare {spec.output}` "
        "shows the trials, best first, and each failure's error")
    return results
