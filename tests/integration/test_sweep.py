"""`hybridrl sweep` end to end on the tiny model (issue #38 part 1): a grid sweep's trials are exactly the runs
their configs give alone; an invalid trial is recorded and the others finish; a sweep whose driver is SIGKILLed
resumes with the same command, keeping finished trials and resuming the others from their checkpoints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
import yaml

from run_helpers import Hold, metrics  # tests/integration/run_helpers.py

pytest.importorskip("ray.tune")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow
MINI, LR, STEPS = "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.optim.lr", \
    "trainer.total_training_steps"


def base(arith_data, **extra) -> dict:
    return {"data.train_files": [arith_data["train"]], "data.val_files": [arith_data["val"]],
            "data.val_max_samples": 8, "data.train_batch_size": 8, "actor_rollout_ref.rollout.n": 4,
            "actor_rollout_ref.actor.optim.warmup_style": "constant", "trainer.test_freq": 1,
            "trainer.logger": ["file"], **extra}


def write_sweep(tmp_path, overrides: dict, space: dict, **keys) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": {"overrides": overrides}, "space": space, "search": "grid",
                                    "metric": "val-core/arithmetic/reward/mean@1", "mode": "max",
                                    "output": str(tmp_path / "out"), **keys}))
    return str(path)


def hybridrl(*args: str, threads: int | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    return subprocess.Popen([sys.executable, "-m", "hybridrl", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, **kw)


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def compare(sweep_dir) -> list[str]:
    """`hybridrl compare SWEEP_DIR`'s table lines (in this process: it only reads files)."""
    import contextlib
    import io

    from hybridrl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compare", str(sweep_dir)]) == 0
    return out.getvalue().splitlines()


def trials(out_dir) -> dict[str, dict]:
    """{trial folder: its trial.json}."""
    return {d: json.loads((out_dir / d / "trial.json").read_text()) for d in sorted(os.listdir(out_dir))
            if (out_dir / d / "trial.json").is_file()}


# what Tune and Ray print when left to themselves: status tables and boxes, a traceback per failed trial, the
# trials' own lines under Ray's worker prefix, Ray's start-up notes
NOISE = re.compile(r"Traceback|Trial status|[╭│╰]|\(\w+ pid=\d+\)|repeated \d+x across cluster|"
                   r"Token authentication|Error file|View detailed results")


def console_of(run_dir) -> str:
    """What a trial's run printed (sweep/trial.py sends it to the run's logs/console.log)."""
    return (run_dir / "logs" / "console.log").read_text()


def plain_runs(arith_data, tmp_path, threads: int, configs: list[dict]) -> list:
    """The same configs as `hybridrl train` runs, side by side, with the trials' thread count (the same float sums)."""
    procs = []
    for i, values in enumerate(configs):
        args = [f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in base(arith_data, **values).items()]
        procs.append(hybridrl("train", *args, f"trainer.default_local_dir={tmp_path / f'plain{i}'}", threads=threads))
    for proc in procs:
        finish(proc)
    return [metrics(tmp_path / f"plain{i}") for i in range(len(configs))]


def test_a_grid_sweep_equals_its_configs_run_alone_and_an_invalid_trial_does_not_stop_it(arith_data, tmp_path):
    sweep = write_sweep(tmp_path, base(arith_data, **{STEPS: 2}), {MINI: {"grid": [4, 8, 3]}, LR: {"grid": [3e-5]}})
    out = finish(hybridrl("sweep", sweep))
    threads = int(re.search(r"each trial: (\d+) CPU core", out)[1])
    assert "3 trials, 1 failed" in out
    found = {t["sampled"][MINI]: (d, t) for d, t in trials(tmp_path / "out").items()}
    assert sorted(found) == [3, 4, 8]
    bad_dir, bad = found[3]
    assert bad["status"] == "error" and bad["error"].startswith(f"{MINI}=3 does not divide data.train_batch_size=8")
    # the console: hybridrl's lines, one per trial event; each trial's own output in its run folder
    assert [line for line in out.splitlines() if NOISE.search(line)] == [], out
    for mini, (d, _) in found.items():  # in the sweep file's order of its space (write_sweep's dump sorts keys)
        assert f"trial {d} started: {LR}=3e-05, {MINI}={mini}" in out
    for mini in (4, 8):
        d = found[mini][0]
        assert re.search(rf"^trial {d} step 1: val-core/arithmetic/reward/mean@1=\S+$", out, re.M)
        assert re.search(rf"^trial {d} finished at step 2: val-core/arithmetic/reward/mean@1=\S+ \(best \S+\)$", out,
                         re.M)
        assert console_of(tmp_path / "out" / d).splitlines()[-1].startswith("done: 2 steps")
    assert (f"trial {bad_dir} error: {bad['error']}; its output: {tmp_path / 'out' / bad_dir / 'logs' / 'console.log'}"
            in out)
    assert not (tmp_path / "out" / bad_dir / "metrics.jsonl").exists()  # it failed before building anything
    alone = plain_runs(arith_data, tmp_path, threads, [{MINI: 4, LR: 3e-5, STEPS: 2}, {MINI: 8, LR: 3e-5, STEPS: 2}])
    assert alone[0] != alone[1]  # the swept value matters: a sweep that ignored it could not match both
    for mini, expected in zip((4, 8), alone):
        run_dir, info = found[mini]
        assert info["status"] == "finished"
        assert len(expected) == 3 and metrics(tmp_path / "out" / run_dir) == expected  # steps 0, 1, 2, all equal
    table = compare(tmp_path / "out")
    assert [line.split()[2] for line in table[1:4]] == ["finished", "finished", "error"]
    best = max((4, 8), key=lambda m: max(r["val-core/arithmetic/reward/mean@1"] for r in alone[(4, 8).index(m)]))
    assert table[1].split()[1] == found[best][0]


def test_asha_stops_the_trial_below_the_rungs_cutoff(arith_data, tmp_path):
    """The metric is the logged learning rate, so which trial is worse is known before anything runs; one trial at
    a time, in grid order: lr=1e-5 runs its 3 steps and sets the cutoff of the rungs at steps 1 and 2; lr=1e-6
    reaches step 1 below it and is stopped there (Tune kills it after that report: it may log step 2 first, never
    its last step 3)."""
    quick = {MINI: 8, STEPS: 3, "trainer.test_freq": -1, "trainer.val_before_train": False}  # no validation needed
    sweep = write_sweep(tmp_path, base(arith_data, **quick), {LR: {"grid": [1e-5, 1e-6]}},
                        metric="actor/lr", max_concurrent=1,
                        scheduler={"name": "asha", "grace_period": 1, "reduction_factor": 2})
    out = finish(hybridrl("sweep", sweep))
    assert "max_concurrent in the sweep file = 1" in out
    found = {t["sampled"][LR]: (d, t["status"]) for d, t in trials(tmp_path / "out").items()}
    assert found[1e-5][1] == "finished" and found[1e-6][1] == "running"  # stopped: it never reached its end
    assert f"trial {found[1e-5][0]} finished at step 3: actor/lr=1e-05 (best 1e-05)" in out
    assert re.search(rf"^trial {found[1e-6][0]} stopped by the scheduler at step [12]: actor/lr=1e-06 \(best 1e-06\)$",
                     out, re.M), out
    steps = lambda d: [r["step"] for r in metrics(tmp_path / "out" / d)]  # noqa: E731
    assert steps(found[1e-5][0]) == [1, 2, 3] and steps(found[1e-6][0]) in ([1], [1, 2])
    table = compare(tmp_path / "out")
    assert table[2].split()[1:5] == [found[1e-6][0], "stopped", "at", "step"]


def checkpointed(run_dir) -> int:
    path = run_dir / "latest_checkpointed_iteration.txt"
    return int(path.read_text()) if path.is_file() else 0


def test_a_sweep_killed_mid_way_resumes_without_redoing_finished_trials(arith_data, tmp_path):
    """Two trials, 1 step and 4 steps, a checkpoint every step, one at a time in grid order. The long one is held
    (run_helpers.Hold) at its first reward after saving step 2; then the sweep is SIGKILLed (its whole process
    group, as a closed terminal would). Killing when the checkpoint appeared raced the run: on loaded cores the
    long trial ran to its end first."""
    hold = Hold(tmp_path / "hold", str(tmp_path / "out" / "*" / "latest_checkpointed_iteration.txt"), at_least=2)
    settings = {MINI: 8, "trainer.save_freq": 1, **hold.overrides()}
    sweep = write_sweep(tmp_path, base(arith_data, **settings), {STEPS: {"grid": [1, 4]}}, max_concurrent=1)
    hold.arm()
    proc = hybridrl("sweep", sweep, start_new_session=True)
    out_dir = tmp_path / "out"
    hold.wait(proc)
    now = {t["sampled"][STEPS]: (d, t["status"]) for d, t in trials(out_dir).items()}
    group = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    psutil.wait_procs([p for p in map(_process, group) if p], timeout=30)
    hold.release()
    (short, short_status), (long, _) = now[1], now[4]
    cut = checkpointed(out_dir / long)
    assert short_status == "finished" and cut == 2, (now, cut)
    kept = {name: (out_dir / short / name).read_bytes() for name in ("metrics.jsonl", "trial.json")}

    threads = int(re.search(r"each trial: (\d+) CPU core", proc.stdout.read())[1])
    resumed = hybridrl("sweep", sweep)
    # meanwhile, the cut trial's config run alone and whole (the trial resumes on one core, this run takes another)
    (alone,) = plain_runs(arith_data, tmp_path, threads, [{**settings, STEPS: 4}])
    out = finish(resumed)
    assert f"resumed from step {cut} " in console_of(out_dir / long) and "resuming the sweep in" in out
    assert f"trial {long} finished at step 4" in out
    assert {name: (out_dir / short / name).read_bytes() for name in kept} == kept  # the finished trial untouched
    assert trials(out_dir)[long]["status"] == "finished"
    assert len(alone) == 5 and metrics(out_dir / long) == alone


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
