"""Signals: outside a graceful loop the first stops at once (Interrupted, no traceback); inside, the
first only asks the loop to stop and the second stops at once; handlers are restored; a hard exit
finds every descendant process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hybridrl import interrupt
from hybridrl.interrupt import Interrupted, StoppedEarly, graceful, handling_signals


@pytest.fixture(autouse=True)
def python_default_handlers():
    """Each test starts from Python's own handlers, whatever an earlier test or library in this process
    installed (a SIGINT left ignored made "restored" and "KeyboardInterrupt as usual" unobservable)."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def send(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode; give the signal time to arrive


def test_outside_a_loop_a_signal_stops_at_once():
    with handling_signals(hard_exit_allowed=False):
        with pytest.raises(Interrupted, match=r"^interrupted \(SIGTERM\)$"):
            send(signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_in_a_loop_the_first_signal_asks_and_the_second_stops(capfd):
    with handling_signals(hard_exit_allowed=False):
        with graceful("the current step") as stop:
            assert not stop.requested
            send(signal.SIGINT)  # no exception: the loop finishes its step
            assert stop.requested and stop.signal_name == "SIGINT"
            with pytest.raises(Interrupted, match=r"^interrupted \(SIGINT again\)$"):
                send(signal.SIGINT)
    assert ("SIGINT received: finishing the current step, then saving a checkpoint and stopping (Ctrl-C again stops at "
            "once, without saving)") in capfd.readouterr().err


def test_a_loop_without_the_cli_handlers_keeps_python_defaults():
    with graceful() as stop:  # a library caller: KeyboardInterrupt as usual, the request is never set
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)
    assert not stop.requested


def test_stopped_early_says_where_the_run_can_resume():
    assert StoppedEarly(5, "SIGINT", "/r").message == (
        "interrupted at step 5 (SIGINT); checkpoint saved in /r/global_step_5 — run the same command to resume")
    assert StoppedEarly(5, "SIGTERM", None).message == (
        "interrupted at step 5 (SIGTERM); nothing was saved (saving is off), so the next run starts over")
    assert StoppedEarly(3, "SIGINT", "/s", resumes=False).message.endswith("the model so far is in /s/global_step_3")


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("use_psutil", [True, False])
def test_descendants_finds_children_and_grandchildren(monkeypatch, use_psutil):
    if not use_psutil:  # the /proc fallback, for machines without psutil
        monkeypatch.setitem(sys.modules, "psutil", None)
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print('ok', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ok"
        assert child.pid in interrupt.descendants()
        grandchildren = interrupt.descendants(child.pid)
        assert len(grandchildren) == 1 and alive(grandchildren[0])
        interrupt.kill_descendants(child.pid)  # this test's subtree only, not pytest's other children
        time.sleep(0.2)
        assert not alive(grandchildren[0]) and child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_step_that_fails_after_a_stop_was_asked_is_the_interrupt():
    """vLLM's engine workers take the terminal's Ctrl-C too and die: the step in progress fails."""
    from hybridrl.interrupt import failing_after

    with handling_signals(hard_exit_allowed=False):
        with graceful() as stop:
            with pytest.raises(RuntimeError, match="a bug"):  # no stop asked: a failure is a failure
                with failing_after(stop, 3):
                    raise RuntimeError("a bug")
            send(signal.SIGINT)
            with pytest.raises(Interrupted) as e:
                with failing_after(stop, 4):
                    raise RuntimeError("EngineCore encountered an issue.\nSee stack trace")
    assert e.value.message == ("interrupted during step 4 (SIGINT); the step failed meanwhile (RuntimeError: EngineCore "
                               "encountered an issue.), most likely because a process of the run got the Ctrl-C too "
                               "(vLLM's engine does)")


def test_a_second_signal_that_a_c_extension_turned_into_another_error_is_still_the_stop():
    """Ray's Cython wait turns an exception raised by a signal handler into a SystemError."""
    from hybridrl.interrupt import failing_after

    with handling_signals(hard_exit_allowed=False):
        with graceful() as stop:
            send(signal.SIGINT)
            with pytest.raises(Interrupted, match=r"^interrupted \(SIGINT again\)$"):
                with failing_after(stop, 4):
                    try:
                        send(signal.SIGINT)
                    except Interrupted:
                        raise SystemError("<cyfunction CoreWorker.wait> returned a result with an exception set")


def test_spawned_processes_in_the_block_lead_their_own_group():
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with interrupt.engine_processes_apart():
        apart = ctx.Process(target=time.sleep, args=(30,))
        apart.start()
    inside = ctx.Process(target=time.sleep, args=(30,))
    inside.start()
    try:
        assert os.getpgid(apart.pid) == apart.pid != os.getpgid(0)  # leads a group of its own
        assert os.getpgid(inside.pid) == os.getpgid(0)  # after the block, children stay in ours
        # (a terminal's Ctrl-C goes to the foreground group: not to `apart`; tests/integration/test_interrupt_run.py
        # sends one to a whole run, here it would reach the test runner's own group)
        assert apart.is_alive()
    finally:
        for p in (apart, inside):
            p.kill()
            p.join(timeout=10)


ORPHAN = """
import multiprocessing, os, time
from hybridrl import interrupt
if __name__ == "__main__":
    with interrupt.engine_processes_apart():
        child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
        child.start()
    print(child.pid, flush=True)
    time.sleep(1.0)
    os._exit(0)  # dies without any cleanup, as on a terminal's hang-up or a kill
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_process_apart_still_ends_when_its_parent_dies_without_cleanup(tmp_path):
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return  # gone: the kernel sent it SIGTERM when its parent died
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError("the spawned process outlived its parent")


# Issue #48 part 2: a signal that lands in code that would swallow the exception (a destructor, a weakref
# finalizer, C code that reports it as "unraisable") stops the command at the next safe bytecode instead of
# being printed as "Exception ignored in ..." with a traceback and lost.
class SlowDestructor:
    def __init__(self, seconds: float):
        self.seconds, self.finished = seconds, False

    def __del__(self):
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:  # Python bytecode: the handler runs in here
            pass
        self.finished = True
        DONE.append(self)


DONE: list = []


def signal_in(seconds: float, sig: int = signal.SIGINT) -> None:
    import threading

    threading.Timer(seconds, os.kill, args=(os.getpid(), sig)).start()


def test_a_signal_inside_a_destructor_stops_after_it_not_in_it(capfd):
    DONE.clear()
    with handling_signals(hard_exit_allowed=False):
        with pytest.raises(Interrupted, match=r"^interrupted \(SIGINT\)$"):
            signal_in(0.1)
            obj = SlowDestructor(0.5)
            del obj  # the signal arrives while __del__ runs
            for _ in range(200):
                time.sleep(0.01)
    assert len(DONE) == 1 and DONE[0].finished  # the destructor ran to its end
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err


def test_a_signal_inside_a_weakref_finalizer_stops_after_it(capfd):
    import weakref

    class Owner:
        pass

    ran = []

    def finalize():
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
        ran.append(True)

    with handling_signals(hard_exit_allowed=False):
        with pytest.raises(Interrupted):
            owner = Owner()
            weakref.finalize(owner, finalize)
            signal_in(0.1)
            del owner
            for _ in range(200):
                time.sleep(0.01)
    assert ran == [True]
    assert "Exception ignored" not in capfd.readouterr().err


def test_an_interrupt_that_c_code_swallowed_is_raised_again(capfd):
    """What reaches sys.unraisablehook (here: raised by a destructor itself, as C callbacks report theirs) is the
    stop, raised in the main thread, not a printed traceback."""
    class RaisesTheStop:
        def __del__(self):
            raise Interrupted("interrupted (SIGINT)")

    with handling_signals(hard_exit_allowed=False):
        with pytest.raises(Interrupted, match=r"^interrupted \(SIGINT\)$"):
            obj = RaisesTheStop()
            del obj
            for _ in range(200):
                time.sleep(0.01)
        assert sys.unraisablehook is interrupt._unraisable
    assert sys.unraisablehook is not interrupt._unraisable  # restored
    assert "Exception ignored" not in capfd.readouterr().err
