"""What a user sees during long work (issue #22): bars on a terminal, plain lines in a log, the
zero-signal warning, no library noise, and trainer.test_freq=-1 as verl means it."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from tests.integration.run_helpers import overrides, train

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}


def cli_train_args(arith_data, run_dir) -> list[str]:
    return ["train", f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
            "data.val_max_samples=8", "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "trainer.total_training_steps=2", "trainer.save_freq=0", f"trainer.default_local_dir={run_dir}"]


# `hybridrl <args>` with every phase shown from its start (a phase shorter than progress.AFTER_S shows
# nothing, and on a fast machine every phase of these small runs may be) and a terminal's bars redrawn
# every 5 ms (a phase that ends between two redraws of the default 0.5 s is never drawn)
EAGER = ("import sys; from hybridrl import cli, progress; progress.AFTER_S = 0.0; progress.TICK_S = 0.005; "
         "sys.exit(cli.main(sys.argv[1:]))")


def in_a_terminal(args: list[str], timeout_s: float = 600) -> tuple[int, str]:
    """(exit code, everything written) of `hybridrl <args>` with stdout and stderr on a pseudo-terminal
    of 120 columns."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin/stdout/stderr are the terminal
        os.execve(sys.executable, [sys.executable, "-c", EAGER, *args], ENV)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a new pty has 0 columns
    out = b""
    while select.select([fd], [], [], timeout_s)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_in_a_log_every_line_is_plain(arith_data, tmp_path):
    out = subprocess.run([sys.executable, "-c", EAGER, *cli_train_args(arith_data, tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "\r" not in out.stdout  # no bar, ours or a library's, writes carriage returns into a log
    assert "Loading weights" not in out.stdout and "Warning" not in out.stdout
    lines = out.stdout.splitlines()
    assert any(line.startswith("step 1 | score=") for line in lines)
    assert any(line.startswith("step 2 gen: ") and " tokens in " in line for line in lines)  # a phase's line
    assert lines[-1].startswith("done: 2 steps (at step 2), validation accuracy")


def test_on_a_terminal_training_and_its_phases_show_bars(arith_data, tmp_path):
    code, out = in_a_terminal(cli_train_args(arith_data, tmp_path / "run"))
    assert code == 0, out[-2000:]
    assert "training: 100%|" in out and "2/2" in out  # the overall bar
    assert "update_actor: " in out and " micro-batch" in out  # a phase's line with its count
    assert "step 1 | score=" in out and "Loading weights" not in out


def test_eval_on_a_terminal_shows_a_bar_over_the_prompts(arith_data):
    code, out = in_a_terminal(["eval", "--data", arith_data["val"], "--max-samples", "4", "--n", "2",
                               "--max-response-length", "4", "--batch-size", "2"])  # a batch per prompt
    assert code == 0, out[-2000:]
    assert re.search(r"eval: +\d+%\|.*\| \d/4 prompts", out)  # drawn while it ran
    assert "val-core/arithmetic/reward/mean@2" in out and "Loading weights" not in out


def test_eval_in_a_log_writes_no_carriage_returns(arith_data):
    out = subprocess.run([sys.executable, "-c", EAGER, "eval", "--data", arith_data["val"], "--max-samples", "4",
                          "--n", "2", "--max-response-length", "4"], capture_output=True, text=True, env=ENV,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "\r" not in out.stdout + out.stderr and "Loading weights" not in out.stderr


def test_no_signal_warns_once_and_test_freq_minus_one_never_validates_after_training(arith_data, tmp_path):
    reward = tmp_path / "zero.py"  # every response scores 0: no group has any spread
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    lines: list[str] = []
    run, summary = train(overrides(arith_data, tmp_path / "run", 3, f"custom_reward_function.path={reward}",
                                   "trainer.test_freq=-1"), log=lines.append)
    warnings = [line for line in lines if line.startswith("WARNING: no learning signal")]
    assert len(warnings) == 1 and "in the last 3 step(s)" in warnings[0]  # a 3-step run: all of it, once
    assert f"custom_reward_function.path={reward}" in warnings[0] and "data.max_response_length" in warnings[0]
    records = [json.loads(line) for line in open(run.tracker.path)]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert [any(k.startswith("val-core/") for k in r) for r in records] == [True, False, False, False]
    assert summary.val_after is None and "before training, none after (trainer.test_freq <= 0)" in summary.line()


def test_test_freq_validates_every_n_steps_and_at_the_last(arith_data, tmp_path):
    run, summary = train(overrides(arith_data, tmp_path / "run", 3, "trainer.test_freq=2",
                                   "trainer.val_before_train=false"))
    records = [json.loads(line) for line in open(run.tracker.path)]
    assert [r["step"] for r in records if any(k.startswith("val-core/") for k in r)] == [2, 3]
    assert summary.val_before is None and summary.val_after is not None
