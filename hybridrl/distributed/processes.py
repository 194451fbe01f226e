"""This node's worker processes, by pid and start time, so that the driver can wait for them to be gone.

`ray.kill` only asks a worker to exit and `ray.shutdown` does not wait for the workers either: under load a
RoleWorker was still running after the driver had exited (found by tests/integration/test_interrupt_run.py).
The driver records each local worker's start time when the pool starts (a pid alone may have been reused by
the time it closes) and, after the kill, waits for them and SIGKILLs the ones left. Read from /proc (psutil is
not a dependency); where there is no /proc nothing is recorded and nothing waited on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Iterable, Optional

POLL_S = 0.05


def start_time(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot, /proc/<pid>/stat field 22), or None when it is gone,
    a zombie (it ended; its parent has not reaped it yet) or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": the command may hold spaces
    except OSError:
        return None
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22 counts from 1 and from pid; here from 0 and from field 3 (state)


def record(pids: Iterable[int]) -> dict[int, int]:
    """pid -> start time of those that are running now."""
    started = {pid: start_time(pid) for pid in pids}
    return {pid: t for pid, t in started.items() if t is not None}


def running(processes: dict[int, int]) -> list[int]:
    """The recorded processes still running: same pid, same start time."""
    return [pid for pid, t in processes.items() if start_time(pid) == t]


def end_processes(processes: dict[int, int], wait_s: float) -> list[int]:
    """Wait up to `wait_s` for the recorded processes to exit; SIGKILL the ones left. Returns those killed."""
    deadline = time.monotonic() + wait_s
    while (left := running(processes)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left
