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
