"""Run model-written Python in a separate, limited, isolated process; never in the trainer's.

In RL with code tools the model being trained writes the code, so the child is treated as hostile:
- Isolation (tools/isolation.py): its own user, mount, PID, network, IPC and UTS namespaces (bubblewrap, else
  `unshare`), with a read-only view of only what the interpreter needs, a fresh /proc, an empty /tmp, no network
  interfaces, and a working folder that is a small tmpfs (`disk_mb`): the user's files, keys, checkpoints and
  the trainer's processes are not there to read, and nothing it writes reaches a disk.
- A seccomp filter (tools/seccomp.py, x86-64): process creation, sockets, ptrace, mount and namespace calls fail
  with EPERM, whatever route the code takes (os.fork, ctypes, a C extension).
- Limits the child sets itself before the code runs: RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space),
  RLIMIT_FSIZE (file size, which also bounds the output), RLIMIT_NOFILE, no core dumps; the parent kills the
  whole process group at the wall-clock timeout.
- An audit hook (PEP 578) that refuses sockets, subprocesses, os.system/exec/spawn/fork and ctypes' named
  symbols with a readable "sandbox: ... is not allowed" (the boundary is the two above; the hook explains).
Where no namespace can be made (no bubblewrap, no user namespaces, not root), the tool refuses to start unless
its config sets `allow_unisolated: true`, and then says at start that the code sees the trainer's files.

What the model reads: the program's output; a program that exits non-zero, is stopped by a limit or by the
sandbox is also a tool error (tool_errors/exit, /limit, /sandbox), so an attempt is counted.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Optional

from hybridrl.errors import ConfigError
import hybridrl.rollout.tools.isolation as isolation
import hybridrl.rollout.tools.seccomp as seccomp
from hybridrl.rollout.tools.base import TOOLS, Tool, ToolError, function_schema

# Runs in the child: limits first, then seccomp, then the audit hook, then the code (main.py in the cwd).
_BOOTSTRAP = seccomp.INSTALL + r"""
import resource, sys
cpu_s, mem, fsize, nofile = (int(x) for x in sys.argv[1:5])
for what, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize),
                    (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(what, (value, value))
if sys.argv[5]:
    _install_seccomp(sys.argv[5])
del _install_seccomp
BLOCKED = ("socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
           "os.forkpty", "pty.spawn", "ctypes.dlsym")
def _hook(event, args):
    if event.startswith(BLOCKED) or event == "ctypes.dlopen" and args and args[0] is not None:
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(_hook)
del _hook, resource
source = open("main.py").read()
exec(compile(source, "main.py", "exec"), {"__name__": "__main__"})
"""
REFUSED = "sandbox: "  # the audit hook's refusals start with it (tool_errors/sandbox)


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # killed after this many seconds
    cpu_s: int = 5  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS (virtual address space; Python alone maps ~50 MB)
    max_output_chars: int = 2000  # stdout + stderr kept for the model (the rest is cut)
    file_size_mb: int = 16  # RLIMIT_FSIZE: any file the code writes, and its output
    max_open_files: int = 64  # RLIMIT_NOFILE
    disk_mb: int = 64  # the working folder's tmpfs (isolated runs): what all of the code's files may take


@dataclass(frozen=True)
class SandboxResult:
    output: str  # stdout and stderr interleaved, cut to max_output_chars
    returncode: int  # the child's exit status (negative: killed by that signal)
    timed_out: bool  # killed at the wall-clock limit


def _minimal_env(home: str) -> dict[str, str]:
    # single-threaded numeric libraries: a thread pool per BLAS would reserve memory past RLIMIT_AS
    return {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _read_output(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(4 * limit + 4)
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "\n...[output truncated]"


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), mode: Optional[str] = None) -> SandboxResult:
    """Run `code` in a limited child process (see the module docstring) and return its output. `mode`: how it
    is isolated, "bwrap" | "unshare" | "none" (default: isolation.mode(), the best this machine has)."""
    mode = isolation.mode() if mode is None else mode
    work = tempfile.mkdtemp(prefix="hybridrl-sandbox-")
    try:
        program = os.path.join(work, "main.py")
        with open(program, "w") as f:
            f.write(code)
        inner = [sys.executable, "-I", "-c", _BOOTSTRAP, str(limits.cpu_s), str(limits.memory_mb * 2**20),
                 str(limits.file_size_mb * 2**20), str(limits.max_open_files),
                 seccomp.program().hex() if seccomp.available() else ""]
        home = work if mode == "none" else isolation.SANDBOX_DIR
        if mode == "bwrap":
            argv = isolation.bwrap_argv(program, limits.disk_mb) + inner
        elif mode == "unshare":
            os.mkdir(os.path.join(work, "root"))
            argv = isolation.unshare_argv(program, limits.disk_mb, os.path.join(work, "root"), inner)
        else:
            argv = inner
        out_path = os.path.join(work, ".output")
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(argv, cwd=work, env=_minimal_env(home), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the child and anything it started
                proc.wait()
        return SandboxResult(_read_output(out_path, limits.max_output_chars),
                             isolation.exit_status(mode, proc.returncode), timed_out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def _say_unisolated() -> None:
    print("hybridrl: warning: the python tool runs the model's code without namespaces (allow_unisolated: true): "
          "it can read what the trainer's user can read", file=sys.stderr, flush=True)


@TOOLS.register("python", "runs Python code in a sandboxed subprocess (resource limits, no network, timeout)")
class PythonSandbox(Tool):
    default_schema = function_schema("python", "Run a Python program and return what it prints (stdout and stderr).",
                                     "code", "the program; print the results you need")

    def __init__(self, tool_schema: dict | None = None, wall_s: float = 10.0, cpu_s: int = 5, memory_mb: int = 1024,
                 max_output_chars: int = 2000, max_concurrent: int = 4, disk_mb: int = 64,
                 allow_unisolated: bool = False):
        # the thread bound is a backstop: the sandbox's own wall-clock kill comes first
        super().__init__(tool_schema, timeout_s=wall_s + 10.0)
        self.limits = SandboxLimits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=memory_mb, max_output_chars=max_output_chars,
                                    disk_mb=disk_mb)
        self._slots = threading.BoundedSemaphore(max_concurrent)  # child processes at once
        if isolation.mode() == "none":
            if not allow_unisolated:
                raise ConfigError("the python tool cannot isolate the model's code on this machine (no bubblewrap, "
                                  "and no user namespaces for unshare): the code would read what the trainer's user "
                                  "can read. Install bubblewrap (apt-get install bubblewrap) or enable user "
                                  "namespaces; or set `allow_unisolated: true` in the tool's config to accept it")
            _say_unisolated()

    def call(self, arguments: dict) -> str:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ToolError('python needs {"code": "<program>"}')
        with self._slots:
            result = run_python(code, self.limits)
        if result.timed_out:
            raise ToolError(f"the program ran past {self.limits.wall_s:g} s and was stopped", kind="timeout")
        if result.returncode != 0:  # the model reads the output either way; the failure is counted by its kind
            if result.returncode < 0:
                status, kind = f"killed by signal {-result.returncode}: a CPU, memory or file-size limit", "limit"
            else:
                status, kind = f"exit code {result.returncode}", "sandbox" if REFUSED in result.output else "exit"
            raise ToolError(f"{result.output}\n[{status}]".strip(), kind=kind)
        return result.output
