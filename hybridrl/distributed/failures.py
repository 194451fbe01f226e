"""How a Ray worker's call ended, and which failing rank to blame first: one that died, then one that raised on
its own, then one that raised inside a collective (where a peer's failure shows up)."""

from __future__ import annotations

COLLECTIVE_ERRORS = ("gloo", "nccl", "connection closed by peer", "connection reset by peer", "processgroup")


def failure_of(ref):
    """The exception a finished call ended with (RayTaskError: it raised; RayActorError and the other
    RayErrors: its process died or was killed), or None when it succeeded or is still running."""
    import ray
    from ray.exceptions import RayError

    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return None
    try:
        ray.get(ref, timeout=0)
    except RayError as e:
        return e
    return None


def died(e) -> bool:
    from ray.exceptions import RayTaskError

    return not isinstance(e, RayTaskError)


def blame_order(e) -> int:
    """0: the process died; 1: it raised; 2: it raised in a collective (a peer's failure shows up there)."""
    if died(e):
        return 0
    return 2 if any(word in str(e).lower() for word in COLLECTIVE_ERRORS) else 1
