"""Where a process group meets (distributed/address.py): loopback stays as it was; across nodes gloo binds to the
interface that holds the node's own address."""

from __future__ import annotations

import socket

import pytest

from hybridrl.distributed import address


def test_the_loopback_interface_is_found_by_its_address():
    assert address.interface_of("127.0.0.1") == "lo"
    assert address.interface_of("203.0.113.77") is None  # TEST-NET-3: on no interface here


def test_one_node_meets_on_the_host_name_as_before():
    assert address.meeting_address(False) == socket.gethostbyname(socket.gethostname())


def test_gloo_is_bound_only_across_nodes_and_never_over_the_users_choice(monkeypatch):
    ray_util = pytest.importorskip("ray.util")  # first: importing Ray writes to the environment
    env: dict[str, str] = {}
    monkeypatch.setattr(address.os, "environ", env)  # this process's own environment stays as it is
    address.bind_gloo_to_node("127.0.0.1")  # one node: gloo's default (the host name's address) is kept
    assert env == {}
    monkeypatch.setattr(ray_util, "get_node_ip_address", lambda: "127.0.0.1")  # this node's Ray address
    address.bind_gloo_to_node("10.87.0.1")  # rank 0 on another node
    assert env == {"GLOO_SOCKET_IFNAME": "lo"}
    env["GLOO_SOCKET_IFNAME"] = "eth7"  # the user's choice wins
    address.bind_gloo_to_node("10.87.0.1")
    assert env == {"GLOO_SOCKET_IFNAME": "eth7"}
