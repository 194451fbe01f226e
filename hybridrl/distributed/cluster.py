"""Joining a Ray cluster by address (ray_kwargs.ray_init.address), checked before Ray is asked to.

Given `host:port` where nothing answers (a head node not started yet, a typo, a firewall), ray.init does not
fail: it retries the GCS for minutes and prints Ray's own connection warnings, and `hybridrl train` or `sweep`
looks hung. One TCP connect first turns that into one line naming the key and the fix. Other forms ("auto", a
"ray://" client address) go to Ray unchanged; it reports those itself.
"""

from __future__ import annotations

import re
import socket
from typing import Any, Optional

from hybridrl.errors import ConfigError

ADDRESS_KEY = "ray_kwargs.ray_init.address"
HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[^:/\s]+):(?P<port>\d{1,5})$")  # 10.0.0.1:6379, [::1]:6379
CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: Optional[str], timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise a ConfigError when `address` is host:port and no process accepts a connection there."""
    m = HOST_PORT.match(address or "")
    if m is None:
        return
    host, port = m["host"].strip("[]"), int(m["port"])
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as e:
        why = "no answer in %gs" % timeout_s if isinstance(e, TimeoutError) else (e.strerror or str(e))
    raise ConfigError(f"{ADDRESS_KEY}={address}: no Ray cluster answers there ({why}); start its head node "
                      f"(`ray start --head --port={port} --node-ip-address={host}`) or give the address it printed")


def init_ray(address: Optional[str], **kwargs: Any) -> None:
    """ray.init for hybridrl's commands: join `address` once something answers there (check_reachable), or start
    an instance (address None or "local"); no dashboard, Ray's logging left to hybridrl (library_logs.py)."""
    import ray

    check_reachable(address)
    ray.init(address=address, include_dashboard=False, configure_logging=False, **kwargs)
