"""distributed/cluster.check_reachable: a host:port where no Ray head answers is one line naming
ray_kwargs.ray_init.address, at once; ray.init retried it for minutes, printing Ray's own warnings."""

from __future__ import annotations

import re
import socket
import time

import pytest

from hybridrl.distributed.cluster import check_reachable
from hybridrl.errors import ConfigError


def closed_port() -> int:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_nobody_listens_on_is_refused_at_once_naming_the_key():
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(ConfigError, match=re.escape(
            f"ray_kwargs.ray_init.address=127.0.0.1:{port}: no Ray cluster answers there (Connection refused); "
            f"start its head node (`ray start --head --port={port} --node-ip-address=127.0.0.1`)")):
        check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5


def test_a_listening_address_and_the_forms_ray_resolves_itself_pass():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
    for address in (None, "auto", "local", "ray://10.0.0.1:10001"):
        check_reachable(address)  # no connect tried: Ray reports these itself


@pytest.mark.usefixtures("default_data_cwd")
def test_a_sweep_joining_an_address_where_nothing_answers_stops_before_ray_starts(tmp_path):
    import ray

    from hybridrl.sweep.driver import run_sweep
    from hybridrl.sweep.spec import parse_sweep

    address = f"127.0.0.1:{closed_port()}"
    spec = parse_sweep({"base": {"overrides": {"ray_kwargs.ray_init.address": address}},
                        "space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-6, 3e-6]}},
                        "metric": "val-core/arithmetic/reward/mean@1", "mode": "max", "output": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match=re.escape(f"ray_kwargs.ray_init.address={address}: no Ray cluster answers")):
        run_sweep(spec, log=lambda _: None)
    assert not ray.is_initialized()


@pytest.mark.usefixtures("default_data_cwd")
def test_a_ray_run_joining_an_address_where_nothing_answers_says_so(tmp_path, capsys):
    import ray

    from hybridrl.cli import main

    address = f"127.0.0.1:{closed_port()}"
    code = main(["train", "trainer.backend=ray", f"ray_kwargs.ray_init.address={address}",
                 "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and f"ray_kwargs.ray_init.address={address}: no Ray cluster answers there" in err, err
    assert not ray.is_initialized()
