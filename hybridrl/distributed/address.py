"""Where a pool's process group meets when its ranks span several machines (Ray nodes).

On one node the ranks meet on this host's name (loopback here), as before. Across nodes the host name is no
use: it often resolves to 127.0.0.1 (Debian's /etc/hosts), which every other node reaches as itself, so the
TCP store never answers and the run stops at trainer.worker_timeout_s. The ranks then meet at the address Ray
knows rank 0's node by (`ray start --node-ip-address`), and each rank's gloo sockets bind to the interface that
holds its own node's Ray address (gloo otherwise binds the host name's address, loopback again).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from typing import Optional

SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def meeting_address(spans_nodes: bool) -> str:
    """The address the other ranks reach this one (rank 0) at: Ray's address of this node when the pool spans
    several nodes, else this host name's address."""
    if spans_nodes:
        import ray.util

        return ray.util.get_node_ip_address()
    return socket.gethostbyname(socket.gethostname())


def interface_of(ip: str) -> Optional[str]:
    """The network interface whose IPv4 address is `ip`, or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # an interface without an IPv4 address
                continue
        if socket.inet_ntoa(got[20:24]) == ip:
            return name
    return None


def bind_gloo_to_node(master: str) -> None:
    """Before joining a process group that meets at `master`: when that is not a loopback address (the pool spans
    nodes), gloo's sockets go on the interface of this node's Ray address (GLOO_SOCKET_IFNAME), unless the user
    chose one."""
    if ipaddress.ip_address(master).is_loopback or os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    import ray.util

    name = interface_of(ray.util.get_node_ip_address())
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name
