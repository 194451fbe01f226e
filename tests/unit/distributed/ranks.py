"""Run a function on two gloo ranks in spawned processes (what the data-parallel tests share)."""

from __future__ import annotations

import socket

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_two_ranks(fn, out: str, model_dir: str) -> None:
    """`fn(rank, port, out, model_dir)` on ranks 0 and 1; an exception in either fails the caller."""
    mp.start_processes(fn, args=(free_port(), out, model_dir), nprocs=2, start_method="spawn")
