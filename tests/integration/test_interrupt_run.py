"""Ctrl-C, SIGTERM and a second run on the same folder, as a user meets them on the command line
(issue #22): the first signal ends training after its step with a checkpoint, and the resumed run
equals the uninterrupted one; a second signal stops at once; never a traceback, never a process left
behind; a second run on a folder refuses at once naming the first one's PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hybridrl.trainer import checkpoint

from run_helpers import Hold, metrics, overrides  # tests/integration/run_helpers.py

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every process: the same float sums


def start(command: str, args: list[str]) -> subprocess.Popen:
    """`hybridrl <command> ...` in its own session, as a terminal runs it: Ctrl-C goes to the whole group."""
    return subprocess.Popen([sys.executable, "-m", "hybridrl", command, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


def wait_for_steps(proc: subprocess.Popen, path, lines: int, timeout: float = 300) -> None:
    """Until `path` (metrics.jsonl) has `lines` lines."""
    deadline = time.time() + timeout
    while not (os.path.exists(path) and len(open(path).readlines()) >= lines):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run did not reach its step in time"
        time.sleep(0.05)


def descendants(pid: int) -> list:
    return psutil.Process(pid).children(recursive=True)


def alive(processes: list) -> list:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def ctrl_c(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    os.killpg(proc.pid, sig)


def test_ctrl_c_ends_after_the_step_with_a_checkpoint_and_resuming_equals_the_uninterrupted_run(arith_data, tmp_path):
    """Ctrl-C comes in step 2, the run held in its scoring (run_helpers.Hold: once validation at step 0 and step 1
    are logged); the run finishes step 2 and saves it."""
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    hold = Hold(tmp_path / "hold", str(stopped / "metrics.jsonl"), at_least=2)
    args = lambda d: overrides(arith_data, d, 6, *hold.args())  # noqa: E731  (saves at the last step only)
    done = subprocess.run([sys.executable, "-m", "hybridrl", "train", *args(straight)], capture_output=True, text=True,
                          env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr

    hold.arm()
    proc = start("train", args(stopped))
    hold.wait(proc)
    workers = descendants(proc.pid)  # the reward pool's processes
    ctrl_c(proc)
    hold.release()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    step = int(err.split("interrupted at step ")[1].split(" ")[0])
    assert step == 2
    assert (f"hybridrl train: interrupted at step {step} (SIGINT); checkpoint saved in {stopped}/global_step_{step} — "
            "run the same command to resume") in err
    assert "SIGINT received: finishing the current step, then saving a checkpoint" in err
    assert "Traceback" not in out + err and not alive(workers) and workers
    assert checkpoint.problem_of(str(stopped / f"global_step_{step}"), verify="") is None

    resumed = subprocess.run([sys.executable, "-m", "hybridrl", "train", *args(stopped)], capture_output=True, text=True,
                             env=ENV, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {step}" in resumed.stdout + resumed.stderr
    assert metrics(stopped) == metrics(straight)


SLOW_REWARD = textwrap.dedent("""
    import time

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        time.sleep(0.15)  # a slow scorer: a step takes seconds, so a second Ctrl-C comes mid-step
        return 0.0
""")


def test_a_second_ctrl_c_stops_at_once_and_leaves_no_process(arith_data, tmp_path):
    reward = tmp_path / "slow.py"
    reward.write_text(SLOW_REWARD)
    run = tmp_path / "run"
    proc = start("train", overrides(arith_data, run, 50, "trainer.save_freq=1", "trainer.val_before_train=false",
                                    f"custom_reward_function.path={reward}"))
    wait_for_steps(proc, run / "metrics.jsonl", 1)
    time.sleep(0.5)  # inside step 2's scoring
    workers = descendants(proc.pid)
    ctrl_c(proc)
    time.sleep(0.3)
    ctrl_c(proc)
    start_stop = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start_stop < 15
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert err.strip().splitlines()[-1].startswith("hybridrl train: interrupted (SIGINT again); the steps after the last "
                                                   f"checkpoint ({run}/global_step_")
    assert err.strip().endswith("are lost — run the same command to resume from it")
    assert workers and not alive(workers)
    steps = [json.loads(line)["step"] for line in open(run / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 50  # stopped early, every line whole


def test_ctrl_c_while_starting_stops_at_once(arith_data, tmp_path):
    for delay in (0.5, 4.0):  # importing, then loading or validating
        # validation of 40 prompts x 128 samples before step 1: still starting at 4 s on any machine (with 16 x 1,
        # a quiet machine reached step 1 inside 4 s and saved a checkpoint)
        proc = start("train", overrides(arith_data, tmp_path / f"run{delay}", 4, "data.val_max_samples=40",
                                        "actor_rollout_ref.rollout.val_kwargs.n=128",
                                        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                                        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"))
        time.sleep(delay)
        ctrl_c(proc)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in out + err, err
        assert err.strip().splitlines()[-1] in (  # before the command is known, reading the config, building the run
            "hybridrl: interrupted (SIGINT)", "hybridrl train: interrupted (SIGINT)",
            "hybridrl train: interrupted (SIGINT); no checkpoint was saved yet")


def test_a_second_run_on_the_folder_refuses_naming_the_first_and_sigterm_stops_it_cleanly(arith_data, tmp_path):
    reward = tmp_path / "slow.py"
    reward.write_text(SLOW_REWARD)
    run = tmp_path / "run"
    args = overrides(arith_data, run, 50, f"custom_reward_function.path={reward}", "trainer.val_before_train=false")
    first = start("train", args)
    wait_for_steps(first, run / "metrics.jsonl", 1)
    started = time.monotonic()
    second = subprocess.run([sys.executable, "-m", "hybridrl", "train", *args], capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert (f"hybridrl train: error: trainer.default_local_dir='{run}' is in use by another run (PID {first.pid} on "
            in second.stderr)
    assert time.monotonic() - started < 60  # refused before loading a model (the CLI's start-up is most of it)
    first.send_signal(signal.SIGTERM)  # a scheduler's stop: to the process only
    out, err = first.communicate(timeout=300)
    assert first.returncode == 130 and "Traceback" not in out + err
    step = json.loads(open(run / "metrics.jsonl").readlines()[-1])["step"]
    assert f"interrupted at step {step} (SIGTERM); checkpoint saved in {run}/global_step_{step}" in err
    assert [json.loads(line)["step"] for line in open(run / "metrics.jsonl")] == list(range(1, step + 1))


def test_sft_ctrl_c_saves_the_model_so_far(random_model_dir, arith_data, tmp_path):
    from transformers import AutoModelForCausalLM

    from hybridrl.trainer.export import actor_folder

    out_dir = tmp_path / "sft"
    proc = start("sft", [f"model.partial_pretrain={random_model_dir}", f"data.train_files={arith_data['train']}",
                         f"data.val_files={arith_data['val']}", "data.train_batch_size=8",
                         "data.micro_batch_size_per_gpu=8", "trainer.total_training_steps=100000",
                         "trainer.test_freq=-1", f"trainer.default_local_dir={out_dir}"])
    wait_for_steps(proc, out_dir / "metrics.jsonl", 3)
    ctrl_c(proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    step = int(err.split("interrupted at step ")[1].split(" ")[0])
    folder = out_dir / f"global_step_{step}"
    assert f"hybridrl sft: interrupted at step {step} (SIGINT); the model so far is in {folder}" in err
    assert actor_folder(str(folder)) == str(folder)  # whole, its checksums verified
    AutoModelForCausalLM.from_pretrained(folder)


def test_serve_and_eval_end_on_ctrl_c_without_a_traceback(arith_data, tmp_path):
    import socket

    import httpx

    pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start("serve", ["tiny-arith", "--engine", "hf", "--port", str(port), "--log-level", "warning"])
    deadline = time.time() + 240
    while True:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    ctrl_c(proc)  # uvicorn shuts down, then hands the signal back to hybridrl's handler
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert err.strip().splitlines()[-1] == "hybridrl serve: interrupted (SIGINT)"

    # 300 prompts x 64 samples: far longer than the 8 s below on any machine (x 8 finished in under 8 s on a quiet one)
    proc = start("eval", ["--model", "tiny-arith", "--data", arith_data["train"], "--n", "64"])
    time.sleep(8)
    ctrl_c(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert err.strip().splitlines()[-1] == "hybridrl eval: interrupted (SIGINT)"


@pytest.mark.parametrize("signals", [1, 2], ids=["ctrl_c", "ctrl_c_twice"])
def test_ray_runs_stop_on_ctrl_c_and_take_their_cluster_with_them(arith_data, tmp_path, signals):
    """Ray's workers live in sessions of their own (the terminal's Ctrl-C does not reach them): the driver
    saves through them, then ends them and the Ray processes it started; twice: stops at once."""
    pytest.importorskip("ray")
    run = tmp_path / "run"
    env = {**ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "hybridrl", "train",
                             *overrides(arith_data, run, 50, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                                        "trainer.val_before_train=false")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    wait_for_steps(proc, run / "metrics.jsonl", 1)
    ray_processes = descendants(proc.pid)  # raylet, GCS, the two workers ...
    for _ in range(signals):
        ctrl_c(proc)
        time.sleep(0.3)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    last = err.strip().splitlines()[-1]
    if signals == 1:
        step = int(last.split("interrupted at step ")[1].split(" ")[0])
        assert checkpoint.problem_of(str(run / f"global_step_{step}"), verify="") is None
    else:
        assert last.startswith("hybridrl train: interrupted (SIGINT again)"), last
    assert len(ray_processes) >= 4 and not alive(ray_processes)


def test_ctrl_c_with_the_vllm_engine_finishes_the_step_and_saves(arith_data, tmp_path):
    """A terminal's Ctrl-C reaches the trainer's process group only: vLLM's engine processes lead their own
    (interrupt.engine_processes_apart), stay alive through the step and end with the run."""
    pytest.importorskip("vllm")
    run = tmp_path / "run"
    hold = Hold(tmp_path / "hold", str(run / "metrics.jsonl"), at_least=2)  # held in step 2's scoring
    hold.arm()
    proc = start("train", overrides(arith_data, run, 6, "actor_rollout_ref.rollout.name=vllm",
                                    "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25", *hold.args()))
    hold.wait(proc, timeout=400)
    workers = descendants(proc.pid)
    ctrl_c(proc)
    hold.release()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "interrupted at step " in err, err[-3000:]
    step = int(err.split("interrupted at step ")[1].split(" ")[0])
    assert step == 2
    assert f"checkpoint saved in {run}/global_step_{step}" in err
    ours = [line for line in (out + err).splitlines() if not line.startswith("(")]  # "(EngineCore pid=..)": vLLM's log
    assert not any("Traceback" in line for line in ours)
    assert checkpoint.problem_of(str(run / f"global_step_{step}"), verify="") is None
    deadline = time.time() + 30
    while alive(workers) and time.time() < deadline:  # the engine's own shutdown
        time.sleep(0.2)
    assert workers and not alive(workers)
