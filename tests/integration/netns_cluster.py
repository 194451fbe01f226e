"""A real two-node Ray cluster on one machine: two network namespaces joined by a veth pair (each its own address,
traffic only between them), `ray start --head` in the first and `ray start --address=...` in the second, so
each node has its own raylet, object store and network stack. Needs root and `ip netns` (CI runs as root).

The test owns every process: `ray start --block` runs under Popen, and teardown kills every pid in each
namespace (`ip netns pids`). Never `ray stop`: it kills the Ray processes of the whole machine (one pid
namespace), the lead's jobs included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUBNET = "10.87.0"  # inside the namespaces only: two runs at once do not see each other's addresses
PORT = 6379
CPUS_PER_NODE = 1


def why_unavailable() -> Optional[str]:
    """Why this machine cannot make the cluster (the skip reason), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"hrprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NetnsCluster:
    """Node "a" (the head, SUBNET.1) and node "b" (a worker, SUBNET.2). `env`: the environment of every command
    run in a namespace (Ray without token auth; this checkout's hybridrl first on the path)."""

    def __init__(self, log_dir: str):
        tag = f"hr{os.getpid()}"
        self.ns = {"a": f"{tag}a", "b": f"{tag}b"}
        self.ip = {"a": f"{SUBNET}.1", "b": f"{SUBNET}.2"}
        self.address = f"{self.ip['a']}:{PORT}"
        self.log_dir = log_dir
        # short: Ray's unix sockets live under it (a socket path has at most 107 characters)
        self.temp = tempfile.mkdtemp(prefix="hr-ray-", dir="/tmp")
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": REPO, "RAY_USAGE_STATS_ENABLED": "0"}
        self.started = 0  # `ray start`s so far: each writes its own log
        self.head_id = ""  # the head's Ray node id (wait_for_nodes)

    def up(self) -> None:
        """Both namespaces, the veth pair between them, and a Ray node in each (returns when both have joined)."""
        veth = {n: f"{ns}v" for n, ns in self.ns.items()}
        for ns in self.ns.values():
            _ip("netns", "add", ns)
        _ip("link", "add", veth["a"], "type", "veth", "peer", "name", veth["b"])
        for n, ns in self.ns.items():
            _ip("link", "set", veth[n], "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.ip[n]}/24", "dev", veth[n])
            _ip("-n", ns, "link", "set", veth[n], "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        self.start_node("a")
        self.start_node("b")
        self.wait_for_nodes(2)

    def start_node(self, node: str) -> None:
        ray = os.path.join(os.path.dirname(sys.executable), "ray")
        where = (["--head", f"--port={PORT}", "--include-dashboard=false"] if node == "a"
                 else [f"--address={self.address}"])
        self.started += 1
        log = open(os.path.join(self.log_dir, f"ray-{node}-{self.started}.log"), "w")
        self.procs[node] = subprocess.Popen(
            self.exec_args(node, ray, "start", "--block", *where, f"--node-ip-address={self.ip[node]}",
                           f"--num-cpus={CPUS_PER_NODE}", "--disable-usage-stats",
                           f"--temp-dir={os.path.join(self.temp, node)}"),
            stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def exec_args(self, node: str, *command: str) -> list[str]:
        """A command line that runs `command` in the node's namespace, at the lowest priority (shared machines)."""
        return ["ip", "netns", "exec", self.ns[node], "nice", "-n", "19", *command]

    def wait_for_nodes(self, n: int, gone: tuple[str, ...] = (), timeout: float = 90) -> list[str]:
        """Wait until the cluster has exactly `n` live nodes, none of them in `gone` (node ids of a killed node that
        the head may still count); their ids."""
        probe = ("import json, sys, time, ray\n"
                 f"ray.init(address='{self.address}', configure_logging=False, log_to_driver=False)\n"
                 f"end = time.monotonic() + {timeout}\n"
                 "while True:\n"
                 "    alive = [[x['NodeManagerAddress'], x['NodeID']] for x in ray.nodes() if x['Alive']]\n"
                 f"    ids = {{i for _, i in alive}}\n"
                 f"    if len(ids) == {n} and not ids & set({list(gone)!r}) or time.monotonic() > end:\n"
                 "        print(json.dumps(alive)); break\n"
                 "    time.sleep(0.5)\n")
        out = subprocess.run(self.exec_args("a", sys.executable, "-c", probe), env=self.env, capture_output=True,
                             text=True, timeout=timeout + 60)
        assert out.returncode == 0, out.stderr[-3000:]
        pairs = json.loads(out.stdout.strip().splitlines()[-1])
        alive = [i for _, i in pairs]
        assert len(alive) == n and not set(alive) & set(gone), f"the cluster has nodes {pairs}, wanted {n}"
        self.head_id = next(i for ip, i in pairs if ip == self.ip["a"])
        return alive

    def pids(self, node: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns[node]], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_node(self, node: str) -> None:
        """SIGKILL every process of the node's namespace (its raylet, object store, workers): the machine is gone."""
        for _ in range(3):  # a process may fork while we kill: sweep again until none is left
            pids = self.pids(node)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        proc = self.procs.pop(node, None)
        if proc is not None:
            proc.wait(timeout=30)

    def down(self) -> None:
        """Kill everything in both namespaces and delete them (the veth pair goes with them)."""
        for node in ("b", "a"):
            self.kill_node(node)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.temp, ignore_errors=True)
