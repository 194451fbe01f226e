"""Issue #48 part 1: the python tool's code as an attacker (the model being trained writes it). Each attack runs
through the tool as a rollout calls it (base.run_calls), under every isolation this machine has (bubblewrap,
unshare): it fails, what it was after stays untouched, the failure is counted as a tool error of its kind, and
the next call works. Then seccomp alone (no audit hook): process creation and sockets fail in the kernel."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hybridrl.errors import ConfigError
from hybridrl.rollout.tools import isolation, sandbox, seccomp
from hybridrl.rollout.tools.base import run_calls
from hybridrl.rollout.tools.sandbox import PythonSandbox

ROOT = Path(__file__).resolve().parents[4]


MODES = [name for name in isolation.PROBES if isolation.works(name)]  # those that work here


@pytest.fixture(params=MODES or ["none"])
def tool(request, monkeypatch):
    if request.param == "none":
        pytest.skip("neither bubblewrap nor user namespaces work here: the tool refuses to start (tested below)")
    monkeypatch.setattr(isolation, "mode", lambda: request.param)
    return PythonSandbox(wall_s=20, cpu_s=10, memory_mb=1024)


def call(tool, code: str):
    (result,) = run_calls([(tool, {"code": code})])
    return result


@pytest.fixture
def listener():
    """A TCP server on the host's loopback that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def attacks(tmp_path: Path, port: int) -> dict[str, str]:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PLANTED-SECRET")
    return {
        "read a planted secret": f"print(open({str(secret)!r}).read())",
        "read the project's files": f"print(open({str(ROOT / 'pyproject.toml')!r}).read())",
        "write outside its folder": f"open({str(tmp_path / 'escaped')!r}, 'w').write('x')",
        "write into the system": "open('/usr/escaped', 'w').write('x')",
        "open a socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
        "a raw socket through _socket": f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))",
        "fork bomb": "import os\nwhile True:\n    os.fork()",
        "fork through ctypes": "import ctypes\nctypes.CDLL(None).fork()",
        "a shell through ctypes": "import ctypes\nctypes.CDLL('libc.so.6').system(b'touch /tmp/owned')",
        "fill the disk": "for i in range(100):\n    open(f'f{i}', 'wb').write(b'0' * (8 * 2**20))",
        "read the trainer's /proc": f"print(open('/proc/{os.getpid()}/environ').read())",
        "list the trainer's processes": f"import os\nassert '{os.getpid()}' in os.listdir('/proc'), 'not there'",
    }


def test_every_attack_fails_is_counted_and_the_next_call_works(tool, tmp_path, listener):
    port, accepted = listener
    before = set(os.listdir("/tmp"))
    outcomes = {}
    for name, code in attacks(tmp_path, port).items():
        r = call(tool, code)
        outcomes[name] = r.error
        assert r.error in ("exit", "limit", "sandbox"), (name, r.error, r.text)
        assert "PLANTED-SECRET" not in r.text and "[project]" not in r.text, name
        assert "HYBRIDRL" not in r.text and "PATH=" not in r.text, name  # no environment of the trainer's
    assert not (tmp_path / "escaped").exists() and not os.path.exists("/usr/escaped")
    assert accepted == []  # no connection reached the host
    assert not os.path.exists("/tmp/owned")
    assert {f for f in set(os.listdir("/tmp")) - before if not f.startswith("hybridrl-sandbox-")} == set()
    assert call(tool, "print(6 * 7)").text == "42\n"  # the run goes on
    print(outcomes)


def test_what_the_code_sees(tool):
    r = call(tool, "import os\nprint(os.getcwd(), [p for p in os.listdir('/proc') if p.isdigit()])")
    cwd, pids = r.text.split(maxsplit=1)
    assert r.error is None and cwd == "/sandbox" and len(eval(pids)) <= 3, r.text  # its own processes only
    # /tmp holds nothing of the host's but the interpreter's own folders, where Python lives under /tmp
    r = call(tool, "import os\nprint(sorted(os.listdir('/tmp')))")
    python_tops = {p.split("/")[2] for p in isolation.readable() if p.startswith("/tmp/")}
    assert r.error is None and set(eval(r.text)) <= python_tops, (r.text, python_tops)
    r = call(tool, "import os\nprint(os.getpid())")  # the first process of its own PID namespace (or near it)
    assert r.error is None and int(r.text) < 10


def test_seccomp_alone_stops_processes_and_sockets_in_the_kernel():
    """Without the audit hook and the namespaces: the filter by itself (tools/seccomp.py)."""
    if not seccomp.available():
        pytest.skip("the seccomp filter is x86-64 only")
    code = seccomp.INSTALL + f"""
_install_seccomp({seccomp.program().hex()!r})
import os, socket, threading
results = []
for name, attempt in (("fork", os.fork), ("socket", socket.socket)):
    try:
        attempt()
        results.append(name + " worked")
    except PermissionError as e:
        results.append(name + " " + str(e.errno))
t = threading.Thread(target=results.append, args=("thread ran",))
t.start(); t.join()
print(results)
"""
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['fork 1', 'socket 1', 'thread ran']"


def test_without_isolation_the_tool_refuses_unless_its_config_accepts_it(monkeypatch, capsys):
    monkeypatch.setattr(isolation, "mode", lambda: "none")
    with pytest.raises(ConfigError, match=r"cannot isolate the model's code.*allow_unisolated: true"):
        PythonSandbox()
    sandbox._say_unisolated.cache_clear()
    tool = PythonSandbox(allow_unisolated=True)
    assert "runs the model's code without namespaces (allow_unisolated: true)" in capsys.readouterr().err
    assert call(tool, "print(1)").text == "1\n"


def test_this_machine_isolates():
    """The suite's own machine must have one of the two: else every attack above was skipped."""
    assert MODES, "neither bubblewrap nor unshare namespaces work: install bubblewrap"
