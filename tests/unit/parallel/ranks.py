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


def finish_rank(out: str, rank: int, result) -> None:
    """A rank's last act: save what it measured for the test (rank_results reads it), leave the group."""
    import torch

    torch.save(result, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def rank_results(fn, out, model_dir: str) -> list:
    """Run `fn(rank, port, out, model_dir)` on two ranks (each ends with finish_rank); their results, by rank."""
    import torch

    spawn_two_ranks(fn, str(out), model_dir)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
