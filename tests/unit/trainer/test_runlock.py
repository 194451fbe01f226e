"""One run per run folder: a second run refuses at once naming the holder's PID; a killed holder leaves
no stale lock (issue #22: two runs on one folder corrupted metrics.jsonl)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hybridrl.errors import ConfigError
from hybridrl.trainer.runlock import LOCK_FILE, RunLock

HOLD = "import sys, time; from hybridrl.trainer.runlock import RunLock; lock = RunLock(sys.argv[1]); " \
       "print('held', flush=True); time.sleep(600)"


def test_a_second_lock_on_the_folder_is_refused_naming_the_holder(tmp_path):
    first = RunLock(str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=rf"trainer\.default_local_dir='.*run' is in use by another run \(PID "
                                          rf"{os.getpid()} on .*\); wait for it to end or stop it, or choose another "
                                          r"trainer\.default_local_dir"):
        RunLock(str(tmp_path / "run"))
    first.release()
    RunLock(str(tmp_path / "run")).release()  # free again


def test_a_lock_held_by_a_killed_process_is_not_stale(tmp_path):
    folder = str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, folder], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"in use by another run \(PID {holder.pid} on "):
            RunLock(folder, key="trainer.default_local_dir")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunLock(folder)  # the kernel dropped the dead process's lock
    assert lock.held and open(os.path.join(folder, LOCK_FILE)).read().startswith(f"PID {os.getpid()} on ")
    lock.release()


def test_an_unwritable_folder_is_a_config_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"trainer\.default_local_dir=.*a_file/run' is not writable .*choose a folder"):
        RunLock(str(blocker / "run"))


def test_the_sft_key_is_named(tmp_path):
    first = RunLock(str(tmp_path))
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"^sft\.dir="):
        RunLock(str(tmp_path), key="sft.dir")
    assert time.monotonic() - start < 1.0  # refused at once, not after waiting
    first.release()


def test_holder_names_the_live_run_and_nobody_once_it_ended(tmp_path):
    """`holder` (compare/view's "running at step N") reads the lock without taking it: a live holder is named,
    a released or killed one is not, though its lock file stays with its PID."""
    from hybridrl.trainer.runlock import holder

    folder = str(tmp_path / "run")
    assert holder(folder) is None  # no lock file at all
    lock = RunLock(folder)
    assert holder(folder).startswith(f"PID {os.getpid()} on ")
    with pytest.raises(ConfigError, match="in use by another run"):  # the probe took nothing, freed nothing
        RunLock(folder)
    lock.release()
    assert holder(folder) is None and os.path.isfile(os.path.join(folder, LOCK_FILE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", HOLD, folder], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "held"
        assert holder(folder).startswith(f"PID {child.pid} on ")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert holder(folder) is None  # the kernel dropped it; the file still names the dead PID
    assert open(os.path.join(folder, LOCK_FILE)).read().startswith(f"PID {child.pid} on ")


def test_holder_without_the_kernels_table_checks_the_pid_on_this_host(tmp_path, monkeypatch):
    import socket

    from hybridrl.trainer import runlock

    monkeypatch.setattr(runlock, "_in_kernel_table", lambda inode: None)  # not Linux
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    for text, live in ((f"PID {os.getpid()} on {host}, since 2026-11-28T10:00:00: hybridrl train", True),
                       (f"PID {dead.pid} on {host}, since 2026-11-28T10:00:00: hybridrl train", False),
                       (f"PID {os.getpid()} on another-{host}, since 2026-11-28T10:00:00: hybridrl train", False),
                       ("", False)):
        (folder / LOCK_FILE).write_text(text + "\n")
        assert (runlock.holder(str(folder)) == text) if live else runlock.holder(str(folder)) is None, text
