"""The namespaces the sandbox's child runs in (tools/sandbox.py): what it sees of the machine.

Two ways to the same view, picked once per process (`mode()`):
- "bwrap": bubblewrap (Debian's `bubblewrap`), the well-kept tool for this;
- "unshare": util-linux's `unshare` into new user, mount, PID, network, IPC and UTS namespaces, where a small
  launcher (LAUNCHER, our code, before the model's) builds the same root with mount(2) and chroot(2);
- "none": neither works here (no user namespaces, not root): the child sees the trainer's filesystem. The
  python tool refuses to start then, unless its config says `allow_unisolated: true`.

The view, either way: an empty root holding read-only binds of the system's programs and libraries (/usr, /bin,
/lib*, /etc/ld.so.cache and the like) and of the Python the trainer runs (its prefix and its venv: no other part
of the home folder or of the project); a fresh /proc of its own PID namespace (the trainer's processes are not
in it); a /dev of null, zero, random and urandom; an empty /tmp; and its working folder /sandbox, a tmpfs of
`disk_mb` holding the program (main.py). No network interfaces at all. Nothing the child writes reaches the
machine's disks.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import Sequence

SANDBOX_DIR = "/sandbox"  # the child's working folder, inside its root
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/ld.so.conf",
          "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
DEVICES = ("null", "zero", "random", "urandom")


def readable() -> list[str]:
    """The host paths the child may read, read-only: SYSTEM (those that exist) and the interpreter's folders."""
    python = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths = [p for p in SYSTEM if os.path.lexists(p)]
    for p in sorted(python):
        if not any(p == s or p.startswith(s + "/") for s in paths):
            paths.append(p)
    return paths


def bwrap_argv(program: str, disk_mb: int) -> list[str]:
    """The bwrap prefix: the view of the module doc, `program` (the host file) bound read-only as main.py."""
    # /tmp first: a venv or Python under /tmp (a clone there) is bound on top of the empty /tmp, not hidden by it
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--tmpfs", "/tmp"]
    for p in readable():
        argv += ["--symlink", os.readlink(p), p] if os.path.islink(p) else ["--ro-bind", p, p]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(disk_mb * 2**20), "--tmpfs",
             SANDBOX_DIR, "--ro-bind", program, f"{SANDBOX_DIR}/main.py", "--chdir", SANDBOX_DIR]
    return argv + ["--"]


# Runs as root of the new user namespace, in its new mount namespace, before anything of the model's: the root
# of the module doc in a tmpfs, then chroot into it, then the interpreter again with the sandbox's bootstrap.
LAUNCHER = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
def mount(src, dst, fs, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    if libc.mount(enc(src), enc(dst), enc(fs), flags, enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "sandbox: mount %s on %s: %s" % (src, dst, os.strerror(e)))
spec = json.loads(sys.argv[1])
root = spec["root"]
mount(None, "/", None, REC | PRIVATE)
mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
os.makedirs(root + "/tmp")  # first: a venv or Python under /tmp is bound on top of it below, not hidden by it
mount("tmpfs", root + "/tmp", "tmpfs", NOSUID | NODEV, "size=1m,mode=1777")
def bind(src, dst, ro):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, BIND | REC)
    if ro:  # the flags the source is mounted with stay (a user namespace may not drop them)
        st = os.statvfs(src)
        keep = sum(f for f, b in ((NOSUID, os.ST_NOSUID), (NODEV, os.ST_NODEV), (NOEXEC, os.ST_NOEXEC)) if st.f_flag & b)
        mount(None, dst, None, BIND | REMOUNT | RDONLY | keep)
for path in spec["readable"]:
    target = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(path), target)
    else:
        bind(path, target, True)
work = root + spec["sandbox"]
os.makedirs(work)
mount("tmpfs", work, "tmpfs", NOSUID | NODEV, "size=%d,mode=700" % spec["disk"])
with open(spec["program"], "rb") as src, open(work + "/main.py", "wb") as dst:
    dst.write(src.read())
os.makedirs(root + "/proc")
os.makedirs(root + "/dev")
mount("tmpfs", root + "/dev", "tmpfs", NOSUID | NOEXEC, "size=64k,mode=755")
for name in spec["devices"]:
    bind("/dev/" + name, root + "/dev/" + name, False)
mount(None, root, None, BIND | REMOUNT | RDONLY | NOSUID | NODEV)
# unshare(CLONE_NEWPID) puts the launcher's children, not itself, in the new PID namespace: the child is its
# first process, mounts its /proc and runs the code; the launcher waits and ends as the child ended (a signal
# kill too, which `unshare --fork` would have reported as its own error)
pid = os.fork()
if pid == 0:
    mount("proc", root + "/proc", "proc", NOSUID | NODEV | NOEXEC)
    os.chroot(root)
    os.chdir(spec["sandbox"])
    os.execv(spec["argv"][0], spec["argv"])
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def unshare_argv(program: str, disk_mb: int, root: str, inner: Sequence[str]) -> list[str]:
    """The whole unshare command: the launcher builds the view under `root` (an empty host folder) and runs
    `inner` (the interpreter and its arguments) in it."""
    import json

    spec = {"root": root, "readable": readable(), "sandbox": SANDBOX_DIR, "disk": disk_mb * 2**20,
            "program": program, "devices": list(DEVICES), "argv": list(inner)}
    return ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--",
            sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(spec)]


def exit_status(mode: str, returncode: int) -> int:
    """The code's own exit status (negative: the signal that killed it). bwrap reports a child killed by signal N
    as 128 + N, as a shell does (so a program's own exit code above 128 reads as a signal there too)."""
    return 128 - returncode if mode == "bwrap" and returncode > 128 else returncode


# each isolation, in the order `mode` prefers them, and a command that starts a process in its namespaces
PROBES = {"bwrap": ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                    "--dev", "/dev", "true"],
          "unshare": ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "true"]}


def works(name: str) -> bool:
    """Whether isolation `name` (a key of PROBES) starts a process here."""
    argv = PROBES[name]
    if shutil.which(argv[0]) is None:
        return False
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def mode() -> str:
    """"bwrap", "unshare" or "none": the first way that starts a process in its namespaces here."""
    return next((name for name in PROBES if works(name)), "none")
