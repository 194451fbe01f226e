"""One run per run folder: an exclusive lock held for the whole run.

Two runs writing one folder interleave `metrics.jsonl`, rewrite each other's `config.yaml` and
race on checkpoints. `RunLock` takes `fcntl.flock` on `<run folder>/.hybridrl.lock` before anything
is read or written there; a second run refuses at once, naming the holder's PID and host (written
into the file). The kernel drops the lock when its process ends, however it ends, so a killed run
never leaves a stale lock; the file itself stays (deleting it would let two runs lock two files).
Read-only commands (eval, export, plot, compare, serve, view) do not take it.
"""

from __future__ import annotations

import datetime
import errno
import os
import socket
import sys
from typing import Callable, Optional

from hybridrl.errors import ConfigError

LOCK_FILE = ".hybridrl.lock"
# flock unsupported by the filesystem (some network filesystems): run unlocked, with a warning
UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def not_writable(key: str, folder: str, e: OSError) -> ConfigError:
    return ConfigError(f"{key}={folder!r} is not writable ({e.strerror or e}); choose a folder you can write to")


class RunLock:
    """Held from construction until `release()` (or the process ends)."""

    def __init__(self, folder: str, key: str = "trainer.default_local_dir", log: Callable[[str], None] = print):
        self.path = os.path.join(folder, LOCK_FILE)
        self._fd: Optional[int] = None
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise not_writable(key, folder, e) from None
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no locking
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read(fd)
            os.close(fd)
            if e.errno in UNSUPPORTED:
                log(f"WARNING: {key}={folder!r}: this filesystem does not support file locks ({e.strerror}); a second "
                    "run started on this folder would not be stopped")
                return
            raise ConfigError(f"{key}={folder!r} is in use by another run ({holder or 'its PID is not written yet'}); "
                              f"wait for it to end or stop it, or choose another {key}") from None
        self._fd = fd
        os.ftruncate(fd, 0)
        started = datetime.datetime.now().isoformat(timespec="seconds")
        os.write(fd, f"PID {os.getpid()} on {socket.gethostname()}, since {started}: {' '.join(sys.argv)}\n".encode())

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __del__(self) -> None:  # a run built but never fitted (tests) lets go of its folder
        self.release()


def holder(folder: str) -> Optional[str]:
    """Who holds `folder`'s run lock now ("PID n on host, since ...: command"), or None when no live run does.
    For read-only commands (compare, view): it never takes the lock, so it cannot make a run that starts at the
    same moment refuse. On Linux the kernel's own table (/proc/locks) says whether the file is locked; elsewhere
    the PID written in the file is checked on this host (a lock of another host's run is not seen)."""
    path = os.path.join(folder, LOCK_FILE)
    try:
        inode = os.stat(path).st_ino
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = _read(fd)
    finally:
        os.close(fd)
    locked = _in_kernel_table(inode)
    if locked is None:
        locked = _pid_alive_here(text)
    return text if locked else None


def _in_kernel_table(inode: int) -> Optional[bool]:
    """Whether a lock on this inode is listed in /proc/locks ("1: FLOCK ADVISORY WRITE pid maj:min:inode 0 EOF");
    None where there is no such table. Only the inode is compared: overlay filesystems report another device."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return any(len(p) > 5 and p[5].rsplit(":", 1)[-1] == str(inode) for p in (line.split() for line in lines))


def _pid_alive_here(text: str) -> bool:
    parts = text.split()
    if len(parts) < 4 or parts[0] != "PID" or not parts[1].isdigit() or parts[3].rstrip(",") != socket.gethostname():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _read(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 4096).decode(errors="replace").strip().splitlines()[0][:300]
    except (OSError, IndexError):
        return ""
