"""distributed/processes: the driver waits for this node's workers after ray.kill and SIGKILLs the ones left,
telling a worker from a later process that got its pid by the start time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hybridrl.distributed.processes import end_processes, record, running, start_time

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")


def sleeper(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_a_process_that_exits_in_time_is_waited_for_not_killed():
    proc = sleeper(0.3)
    processes = record([proc.pid])
    assert running(processes) == [proc.pid]
    t0 = time.monotonic()
    assert end_processes(processes, wait_s=10) == []  # it exits by itself (a zombie until reaped: gone)
    assert time.monotonic() - t0 < 5
    assert proc.wait(timeout=5) == 0


def test_a_process_still_running_at_the_deadline_gets_sigkill():
    proc = sleeper(60)
    processes = record([proc.pid])
    t0 = time.monotonic()
    assert end_processes(processes, wait_s=0.2) == [proc.pid]
    assert proc.wait(timeout=5) == -9
    assert 0.2 <= time.monotonic() - t0 < 5


def test_a_pid_running_with_another_start_time_is_someone_else_and_left_alone():
    proc = sleeper(60)
    try:
        mine = start_time(proc.pid)
        assert mine is not None
        assert end_processes({proc.pid: mine - 1}, wait_s=0.2) == []  # the recorded worker is gone; pid reused
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_gone_and_zombie_processes_have_no_start_time_and_are_not_recorded():
    proc = sleeper(0)
    deadline = time.monotonic() + 10
    while start_time(proc.pid) is not None and time.monotonic() < deadline:  # exited, not reaped: a zombie
        time.sleep(0.02)
    assert start_time(proc.pid) is None and record([proc.pid]) == {}
    proc.wait()
    assert start_time(proc.pid) is None
    assert start_time(os.getpid()) is not None and record([os.getpid()]) == {os.getpid(): start_time(os.getpid())}
