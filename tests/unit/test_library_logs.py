"""hybridrl/library_logs.py: the libraries' output goes to the run folder's files; the console keeps errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from hybridrl import library_logs
from hybridrl.library_logs import (adopt_logger, driver_log, process_output_to, route_library_logging,
                                   strip_warning_tracebacks)


@pytest.fixture
def routed(tmp_path):
    run = tmp_path / "run"
    path = route_library_logging(str(run))
    yield run, path
    root = logging.getLogger()
    for handler in library_logs._installed:
        root.removeHandler(handler)
    library_logs._installed.clear()


def _warn_with_traceback(logger: logging.Logger) -> None:
    try:
        raise ValueError("Tokenizer not available")
    except ValueError:
        logger.warning("Chat template warmup failed", exc_info=True)


def _run(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, as a command's process: its real stdout and stderr."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_library_warnings_go_to_the_file_and_errors_to_the_console_too(tmp_path):
    run = tmp_path / "run"
    out = _run(f"""
import logging
from hybridrl.library_logs import route_library_logging
path = route_library_logging({str(run)!r})
import os; assert not os.path.exists({str(run)!r})  # nothing is written before a record comes
lib = logging.getLogger("somelib.module")
try:
    raise ValueError("Tokenizer not available")
except ValueError:
    lib.warning("Chat template warmup failed", exc_info=True)
lib.error("the engine died")
print("hybridrl's own line")
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hybridrl's own line\n" and out.stderr == "somelib.module: ERROR: the engine died\n"
    text = open(driver_log(str(run))).read()
    assert "somelib.module WARNING: Chat template warmup failed" in text and "ValueError: Tokenizer" in text
    assert "somelib.module ERROR: the engine died" in text


def test_file_only_loggers_reach_the_file_and_not_the_console(tmp_path):
    run = tmp_path / "run"
    out = _run(f"""
import logging
from hybridrl.library_logs import route_library_logging
route_library_logging({str(run)!r}, file_only=("ray.tune",))
for name in ("ray.tune.execution.tune_controller", "ray.tune", "ray.tuner", "ray"):
    logging.getLogger(name).error("from %s", name)
""")
    assert out.returncode == 0, out.stderr
    # ray.tuner is not under ray.tune: a prefix of the name is not enough
    assert out.stderr == "ray.tuner: ERROR: from ray.tuner\nray: ERROR: from ray\n"
    text = open(driver_log(str(run))).read()
    assert all(f"from {name}" in text for name in ("ray.tune.execution.tune_controller", "ray.tune", "ray.tuner"))


def test_routing_again_replaces_the_handlers(routed, tmp_path):
    route_library_logging(str(tmp_path / "second"))
    ours = [h for h in logging.getLogger().handlers if h in library_logs._installed]
    assert len(ours) == 2 and ours[0].baseFilename == str(tmp_path / "second" / "logs" / "driver.log")


def test_a_warning_keeps_its_line_and_loses_its_traceback_on_a_librarys_own_handler(tmp_path):
    logger = logging.getLogger("ownhandler")
    logger.propagate = False
    out = tmp_path / "out.txt"
    handler = logging.FileHandler(out)
    logger.addHandler(handler)
    try:
        strip_warning_tracebacks("ownhandler")
        strip_warning_tracebacks("ownhandler")  # twice: one filter
        assert len(handler.filters) == 1
        _warn_with_traceback(logger)
        try:
            raise RuntimeError("real")
        except RuntimeError:
            logger.error("a real error keeps its traceback", exc_info=True)
        handler.flush()
        text = out.read_text()
        assert "Chat template warmup failed\n" in text and "ValueError" not in text
        assert "RuntimeError: real" in text
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_an_adopted_logger_prints_through_the_root_handlers(routed, capfd):
    run, path = routed
    logger = logging.getLogger("selfish")
    logger.addHandler(logging.StreamHandler(sys.stderr))
    logger.propagate = False
    adopt_logger("selfish")
    logger.warning("Token authentication is enabled")
    for handler in library_logs._installed:
        handler.flush()
    assert capfd.readouterr().err == ""
    assert "selfish WARNING: Token authentication is enabled" in open(path).read()


def test_process_output_goes_to_the_file_and_child_processes_keep_it(tmp_path):
    path = str(tmp_path / "logs" / "engine.log")
    out = _run(f"""
import os, subprocess, sys
from hybridrl.library_logs import process_output_to
print("before", flush=True)
with process_output_to({path!r}):
    print("inside", flush=True)
    os.write(2, b"from C on fd 2\\n")
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.5); "
                              "print('child, later'); print('child err', file=sys.stderr)"])
print("after", flush=True)
assert child.wait(30) == 0
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "before\nafter\n" and out.stderr == ""
    assert open(path).read().splitlines() == ["inside", "from C on fd 2", "child, later", "child err"]


def test_in_a_process_sent_to_its_own_file_the_block_changes_nothing(tmp_path):
    worker, other = str(tmp_path / "logs" / "actor-rank0.log"), str(tmp_path / "logs" / "driver.log")
    out = _run(f"""
from hybridrl.library_logs import output_file, process_output_to, send_process_output_to
assert output_file("x") == "x"
send_process_output_to({worker!r})
with process_output_to({other!r}):
    print("engine start", flush=True)
print("later", flush=True)
assert output_file("x") == {worker!r}
""")
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
    assert open(worker).read() == "engine start\nlater\n"
    assert not os.path.exists(other)
