"""Ctrl-C (SIGINT) and SIGTERM without tracebacks or orphaned processes.

The CLI routes both signals here (`handling_signals`). Outside a training loop a signal stops the
command at once: `Interrupted` is raised in the main thread, `finally` blocks close the scoring
pools, Ray workers and engines on the way out, and the CLI prints one line and exits 130. Inside a
loop that can stop cleanly (`graceful`), the first signal only records the request: the loop
finishes the step in progress, saves a checkpoint and stops. A second signal stops at once. If the
way out takes longer than `HARD_EXIT_S` (a cleanup stuck on a hung process), or a third signal
comes while stopping, the process kills its child processes and exits 130 on the spot.

Why finish the step rather than abandon it: a step is not undoable once its update started, and a
checkpoint must hold the state after a whole step (weights, optimizer, sampler, RNG, sampling
counters) for the resumed run to equal the uninterrupted one. The notice printed on the first
signal says so, and that a second Ctrl-C stops without waiting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Iterator, Optional

EXIT_CODE = 130  # the shell's code for a command ended by SIGINT (128 + 2)
HARD_EXIT_S = 10.0  # the most a stop-at-once may spend on cleanup before the process ends itself
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """Stop now. A BaseException like KeyboardInterrupt, so no `except Exception` swallows it; the CLI
    prints `message` as one line and exits 130."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class StoppedEarly(Interrupted):
    """A training loop stopped cleanly after a signal: at `step`, with a checkpoint in `run_dir` (None: the
    run does not save)."""

    def __init__(self, step: int, signal_name: str, run_dir: Optional[str], resumes: bool = True):
        if run_dir is None:
            then = "nothing was saved (saving is off), so the next run starts over"
        elif resumes:
            folder = os.path.join(run_dir, f"global_step_{step}")
            then = f"checkpoint saved in {folder} — run the same command to resume"
        else:
            then = f"the model so far is in {os.path.join(run_dir, f'global_step_{step}')}"
        super().__init__(f"interrupted at step {step} ({signal_name}); {then}")
        self.step = step


@dataclass
class StopRequest:
    """A loop's view of the first signal: `signal_name` is set once one arrived ("SIGINT", "SIGTERM")."""

    what: str  # what the loop finishes before stopping, for the notice ("the current step")
    signal_name: Optional[str] = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


class _State:
    installed = False
    hard_exit = False  # the CLI process: may end itself (a test's process must not)
    stopping = False  # an Interrupted was raised: the process is on its way out
    reason: Optional[str] = None  # what started the stop at once: "SIGINT", "SIGTERM again" ...
    loop: Optional[StopRequest] = None  # the graceful section in progress, if any
    pending: Optional["Interrupted"] = None  # a stop not raised yet: the signal came where it would be swallowed
    unraisable_hook = None  # sys.unraisablehook as it was before handling_signals


_state = _State()


def _say(text: str) -> None:
    """Write to stderr from a signal handler: os.write, since the handler may have interrupted a
    write to sys.stderr's buffer (a reentrant buffered write raises)."""
    with contextlib.suppress(OSError, ValueError):
        os.write(sys.stderr.fileno(), text.encode())


def descendants(root: Optional[int] = None) -> list[int]:
    """PIDs of the children, grandchildren ... of `root` (default: this process); psutil when installed,
    else /proc."""
    root = os.getpid() if root is None else root
    try:
        import psutil

        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    except ImportError:
        pass
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])  # after "pid (comm) state"
                parents.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stopping() -> bool:
    """An Interrupted was raised: whatever fails from now on fails because the process is on its way out
    (a C extension may turn the Interrupted into an error of its own, e.g. Ray's SystemError)."""
    return _state.stopping


def interrupted_message() -> str:
    """What an interrupted command says when the error that ended it is not our Interrupted (a C extension
    turned it into its own, or a KeyboardInterrupt arrived before the handlers were installed)."""
    return f"interrupted ({_state.reason or 'SIGINT'})"


def kill_descendants(root: Optional[int] = None) -> None:
    """SIGKILL every descendant process of `root` (default: this one): what an interrupted command's
    cleanup left behind."""
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def hard_exit(reason: str) -> None:
    """Kill every descendant process (scorers, Ray, engines) and end this process now, exit 130."""
    _say(f"\nhybridrl: {reason}; stopping now\n")
    kill_descendants()
    os._exit(EXIT_CODE)


def _watchdog() -> None:
    """After a stop-at-once, the cleanup gets HARD_EXIT_S; then the process ends regardless."""
    if not _state.hard_exit:
        return
    timer = threading.Timer(HARD_EXIT_S, hard_exit, args=(f"cleanup took over {HARD_EXIT_S:g}s",))
    timer.daemon = True
    timer.start()


# Where an exception cannot leave the running code: Python prints it ("Exception ignored in ...", a traceback)
# and goes on, and the stop is lost: a destructor (__del__), a weakref callback or finalizer. A stop that lands
# there is raised as soon as the main thread runs anything else (RETRY_S). What C code swallows anyway (a gc
# callback, an extension's callback) reaches sys.unraisablehook, which raises it again the same way.
RETRY_S = 0.02


def swallowing_frame(frame) -> Optional[str]:
    """The function of `frame` or of a caller above it that would swallow an exception raised now, or None."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (code.co_filename.endswith("weakref.py") and code.co_name == "__call__"):
            return code.co_name
        frame = frame.f_back
    return None


def _raise_later(e: "Interrupted") -> None:
    """Raise `e` in the main thread at its next bytecode outside a swallowing frame (_handle re-checks)."""
    import _thread

    _state.pending = e
    timer = threading.Timer(RETRY_S, _thread.interrupt_main, args=(signal.SIGINT,))
    timer.daemon = True
    timer.start()


def _unraisable(hook_args) -> None:
    """sys.unraisablehook while signals are handled: an Interrupted that C code or a destructor swallowed anyway
    (printed as 'Exception ignored in ...' otherwise) is raised again in the main thread instead of printed."""
    if isinstance(hook_args.exc_value, Interrupted):
        _raise_later(hook_args.exc_value)
        return
    (_state.unraisable_hook or sys.__unraisablehook__)(hook_args)


def _handle(signum: int, frame) -> None:
    """First signal in a graceful loop: a request. Otherwise stop at once (raise); a signal while already
    stopping: end the process now. A stop that would land where it is swallowed waits for the next safe
    bytecode (swallowing_frame)."""
    if _state.pending is not None:  # a stop decided earlier, delivered again by _raise_later
        e, _state.pending = _state.pending, None
        if swallowing_frame(frame):
            _raise_later(e)
            return
        raise e
    name = signal.Signals(signum).name
    loop = _state.loop
    if _state.stopping and _state.hard_exit:
        hard_exit(f"{name} while stopping")
    if loop is not None and not loop.requested:
        loop.signal_name = name
        _say(f"\n{name} received: finishing {loop.what}, then saving a checkpoint and stopping "
             "(Ctrl-C again stops at once, without saving)\n")
        return
    _state.stopping = True
    _watchdog()
    again = " again" if loop is not None else ""
    _state.reason = f"{name}{again}"
    stop = Interrupted(f"interrupted ({name}{again})")
    if swallowing_frame(frame):
        _raise_later(stop)
        return
    raise stop


@contextlib.contextmanager
def handling_signals(hard_exit_allowed: bool = True) -> Iterator[None]:
    """Route SIGINT/SIGTERM through this module while the block runs (main thread only; elsewhere a
    no-op), then restore the previous handlers. `hard_exit_allowed`: the process may end itself
    (the CLI); tests that run commands in-process pass False."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _state.installed, _state.hard_exit, _state.stopping, _state.loop = True, hard_exit_allowed, False, None
    _state.pending, _state.unraisable_hook, sys.unraisablehook = None, sys.unraisablehook, _unraisable
    for s in SIGNALS:
        signal.signal(s, _handle)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = _state.unraisable_hook or sys.__unraisablehook__
        _state.installed, _state.loop, _state.pending = False, None, None


@contextlib.contextmanager
def failing_after(stop: StopRequest, step: int) -> Iterator[None]:
    """A step that fails once a stop was asked for is reported as the interrupt it most likely is: the
    terminal sends Ctrl-C to the whole process group, and a child process with its own SIGINT handler
    (vLLM's engine workers: they are spawned, so no inherited mask keeps it from them) ends with it.
    Then there is no whole step to save: stop at once, one line, with the failure's own words."""
    try:
        yield
    except Exception as e:
        if not stop.requested:
            raise
        if _state.stopping or isinstance(e.__context__, Interrupted):
            # the second signal's Interrupted, which a C extension (Ray's wait) turned into another error
            raise Interrupted(f"interrupted ({stop.signal_name} again)") from None
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise Interrupted(f"interrupted during step {step} ({stop.signal_name}); the step failed meanwhile "
                          f"({type(e).__name__}: {first}), most likely because a process of the run got the Ctrl-C "
                          "too (vLLM's engine does)") from None


@contextlib.contextmanager
def graceful(what: str = "the current step") -> Iterator[StopRequest]:
    """Inside the block the first signal only sets the returned request's `signal_name`; the loop
    checks `requested` at its safe points. Without `handling_signals` around it (a library caller)
    the request is never set and signals keep their usual effect."""
    request = StopRequest(what)
    outer = _state.loop
    if _state.installed:
        _state.loop = request
    try:
        yield request
    finally:
        _state.loop = outer


def _spawn_apart(path: str, args: list, passfds) -> int:
    """multiprocessing.util.spawnv_passfds (fork + exec of a "spawn" child) with the child leading a process
    group of its own. Between fork and exec the child only moves group, keeps `passfds` open and execs."""
    passfds = sorted(map(int, passfds))
    parent, set_death_signal = os.getpid(), _death_signal_setter()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            # out of our group, a terminal's hang-up (SIGHUP to the group) no longer reaches it: have the
            # kernel send SIGTERM when this process dies instead, however it dies (kept across exec)
            if set_death_signal is not None:
                set_death_signal(1, signal.SIGTERM)  # prctl(PR_SET_PDEATHSIG, SIGTERM)
            if os.getppid() != parent:  # died before that took effect
                os._exit(1)
            for fd in passfds:
                os.set_inheritable(fd, True)
            os.execv(path, args)
        finally:
            os._exit(127)
    # the shells' way: set the group from both sides, so it holds as soon as fork returns here, whichever
    # side runs first (after the child's exec this fails with EACCES, and the child has done it by then)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    return pid


def _death_signal_setter():
    """libc's prctl on Linux (looked up before forking), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def engine_processes_apart() -> Iterator[None]:
    """Processes started inside this block by multiprocessing's "spawn" method (vLLM's engine on the CPU,
    and the workers the engine starts in turn, which stay in its group) lead a process group of their own.
    A terminal's Ctrl-C goes to its foreground process group only: the trainer gets it and finishes its
    step with the engine alive, where an engine in the trainer's group (vLLM's processes install their
    own SIGINT handlers) would die mid-step and lose the step. The engine still ends with the trainer:
    its own shutdown on the way out, or `kill_descendants`, which follows the process tree."""
    import multiprocessing.util as mp_util

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = mp_util.spawnv_passfds
    mp_util.spawnv_passfds = _spawn_apart
    try:
        yield
    finally:
        mp_util.spawnv_passfds = before
