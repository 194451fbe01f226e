"""Run model-written Python in a separate, limited process; never in the trainer's.

Each run gets a fresh temporary working directory (deleted afterwards), a minimal environment
and its own process group, and the child limits itself before running the code:
RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space), RLIMIT_FSIZE (file size, which also bounds
the output), RLIMIT_NOFILE, no core dumps. The parent kills the whole group at the wall-clock
timeout.

Network: where unprivileged user namespaces work, the child runs under `unshare -rn`, in a
network namespace with no interfaces (nothing is reachable). Always, an audit hook (PEP 578) in
the child refuses to create sockets, start processes (subprocess, os.system/exec/spawn/fork)
or resolve named C symbols through ctypes. Honest limits: the audit hook is a speed bump, not a
boundary (code that corrupts the interpreter's memory can get past it), and the filesystem is
not isolated: the code can read what the trainer's user can read, and write within the file
size limit. Run untrusted-model training on machines where that is acceptable, or put the
trainer in a container.
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

from hybridrl.rollout.tools.base import TOOLS, Tool, ToolError, function_schema

# Runs in the child: limits first, then the audit hook, then the code (from main.py in the cwd).
_BOOTSTRAP = r"""
import resource, sys
cpu_s, mem, fsize, nofile = (int(x) for x in sys.argv[1:5])
for what, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize),
                    (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(what, (value, value))
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


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # killed after this many seconds
    cpu_s: int = 5  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS (virtual address space; Python alone maps ~50 MB)
    max_output_chars: int = 2000  # stdout + stderr kept for the model (the rest is cut)
    file_size_mb: int = 16  # RLIMIT_FSIZE: any file the code writes, and its output
    max_open_files: int = 64  # RLIMIT_NOFILE


@dataclass(frozen=True)
class SandboxResult:
    output: str  # stdout and stderr interleaved, cut to max_output_chars
    returncode: int  # the child's exit status (negative: killed by that signal)
    timed_out: bool  # killed at the wall-clock limit


@functools.lru_cache(maxsize=1)
def network_isolation() -> list[str]:
    """The command prefix that gives the child no network: ["unshare", "-rn"] where user namespaces
    work here, else [] (the audit hook alone; see the module docstring)."""
    if shutil.which("unshare") is None:
        return []
    try:
        ok = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return ["unshare", "-rn"] if ok else []


def _minimal_env(home: str) -> dict[str, str]:
    # single-threaded numeric libraries: a thread pool per BLAS would reserve memory past RLIMIT_AS
    return {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _read_output(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(4 * limit + 4)
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "\n...[output truncated]"


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` in a limited child process (see the module docstring) and return its output."""
    work = tempfile.mkdtemp(prefix="hybridrl-sandbox-")
    try:
        with open(os.path.join(work, "main.py"), "w") as f:
            f.write(code)
        argv = [*network_isolation(), sys.executable, "-I", "-c", _BOOTSTRAP, str(limits.cpu_s),
                str(limits.memory_mb * 2**20), str(limits.file_size_mb * 2**20), str(limits.max_open_files)]
        out_path = os.path.join(work, ".output")
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(argv, cwd=work, env=_minimal_env(work), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the child and anything it started
                proc.wait()
        return SandboxResult(_read_output(out_path, limits.max_output_chars), proc.returncode, timed_out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@TOOLS.register("python", "runs Python code in a sandboxed subprocess (resource limits, no network, timeout)")
class PythonSandbox(Tool):
    default_schema = function_schema("python", "Run a Python program and return what it prints (stdout and stderr).",
                                     "code", "the program; print the results you need")

    def __init__(self, tool_schema: dict | None = None, wall_s: float = 10.0, cpu_s: int = 5, memory_mb: int = 1024,
                 max_output_chars: int = 2000, max_concurrent: int = 4):
        # the thread bound is a backstop: the sandbox's own wall-clock kill comes first
        super().__init__(tool_schema, timeout_s=wall_s + 10.0)
        self.limits = SandboxLimits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=memory_mb, max_output_chars=max_output_chars)
        self._slots = threading.BoundedSemaphore(max_concurrent)  # child processes at once

    def call(self, arguments: dict) -> str:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ToolError('python needs {"code": "<program>"}')
        with self._slots:
            result = run_python(code, self.limits)
        if result.timed_out:
            raise ToolError(f"the program ran past {self.limits.wall_s:g} s and was stopped", kind="timeout")
        if result.returncode != 0:
            status = (f"exit code {result.returncode}" if result.returncode > 0 else
                      f"killed by signal {-result.returncode}: a CPU, memory or file-size limit")
            return f"{result.output}\n[{status}]".strip()
        return result.output
