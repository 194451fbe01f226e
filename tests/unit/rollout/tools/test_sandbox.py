"""The Python sandbox: limits, timeouts, no network, no processes, output truncation, cleanup."""

import glob
import os
import time

import pytest

from hybridrl.rollout.tools.base import ToolError
from hybridrl.rollout.tools.sandbox import PythonSandbox, SandboxLimits, run_python


@pytest.mark.parametrize("mode", ["default", "none"])
def test_runs_code_in_a_fresh_directory_with_a_minimal_environment(mode):
    before = set(glob.glob("/tmp/hybridrl-sandbox-*"))
    code = "import os, sys\nprint(os.getcwd(), sorted(os.environ)[:2], sys.flags.isolated, os.listdir('.'))"
    r = run_python(code, mode=None if mode == "default" else mode)
    cwd = r.output.split()[0]
    assert r.returncode == 0 and "['HOME', 'LANG']" in r.output, r.output
    assert cwd == ("/sandbox" if mode == "default" else cwd) and (mode == "default" or "hybridrl-sandbox-" in cwd)
    assert "'main.py'" in r.output.split("[")[-1]  # its folder holds the program (and unisolated, the output file)
    assert " 1 " in r.output  # python -I: no user site, no PYTHON* variables
    assert set(glob.glob("/tmp/hybridrl-sandbox-*")) == before  # the host folder is removed afterwards


def test_wall_clock_timeout_kills_the_process_group():
    start = time.monotonic()
    r = run_python("import time\ntime.sleep(60)", SandboxLimits(wall_s=1))
    assert r.timed_out and time.monotonic() - start < 10


def test_cpu_and_memory_limits():
    busy = run_python("while True: pass", SandboxLimits(wall_s=20, cpu_s=1))
    assert not busy.timed_out and busy.returncode < 0  # killed by the CPU limit before the wall clock
    big = run_python("x = bytearray(3 * 2**30)", SandboxLimits(memory_mb=512))
    assert big.returncode != 0 and "MemoryError" in big.output


@pytest.mark.parametrize("code, event", [
    ("import socket; socket.socket()", "socket.__new__"),
    ("import socket; socket.create_connection(('127.0.0.1', 80))", "socket."),
    ("import subprocess; subprocess.run(['true'])", "subprocess.Popen"),
    ("import os; os.system('true')", "os.system")])
def test_no_network_and_no_processes(code, event):
    r = run_python(code)
    assert r.returncode == 1 and f"sandbox: {event}" in r.output


def test_output_is_truncated_and_files_are_bounded():
    r = run_python("print('x' * 100000)", SandboxLimits(max_output_chars=50))
    assert r.output.endswith("[output truncated]") and len(r.output) < 100
    big_file = run_python("open('f', 'wb').write(b'0' * (64 * 2**20))", SandboxLimits(file_size_mb=1))
    assert big_file.returncode != 0


def test_tool_reports_errors_and_timeouts_to_the_model():
    tool = PythonSandbox(wall_s=1)
    assert tool.call({"code": "print(6 * 7)"}) == "42\n"
    for code, kind, says in (("1/0", "exit", "ZeroDivisionError"), ("import os; os.system('true')", "sandbox",
                                                                      "sandbox: os.system is not allowed"),
                             ("x = bytearray(3 * 2**30)", "exit", "MemoryError"), ("while True: pass", "timeout", "")):
        with pytest.raises(ToolError) as e:  # the model reads the output; the failure is counted by its kind
            tool.call({"code": code})
        assert e.value.kind == kind and says in str(e.value), (code, e.value.kind, str(e.value))
    assert "[exit code 1]" in str(pytest.raises(ToolError, tool.call, {"code": "1/0"}).value)
    with pytest.raises(ToolError, match="code"):
        tool.call({"program": "print(1)"})
    assert not glob.glob("/tmp/hybridrl-sandbox-*")
