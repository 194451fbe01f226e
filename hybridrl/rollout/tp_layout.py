"""Where the rollout engines of a Ray actor pool sit (`actor_rollout_ref.rollout.tensor_model_parallel_size`).

verl's layout: `tp` consecutive ranks of one node form one engine, so a pool of `world` ranks runs
world / tp engines (the engines' data-parallel size). Every rank of an engine takes part in it
(vLLM's external launcher: each rank runs the same scheduler over the same requests and holds 1/tp
of every layer), so every rank of engine e is handed engine e's prompts and generates them; the
engine's first rank, its leader, is the one whose responses are kept (the others' are the same
responses). Weights reach an engine on every one of its ranks: each rank loads the whole state dict
and keeps its tensor-parallel slice of it.

Also here: which CPU cores a rank's share of an engine may use, so that two workers of one node do
not bind their engine threads to the same cores. Pure: no torch.distributed, Ray or vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar

from hybridrl.errors import ConfigError

T = TypeVar("T")
TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


@dataclass(frozen=True)
class RolloutLayout:
    """`world` ranks of one pool in engines of `tp` consecutive ranks."""

    world: int
    tp: int = 1

    def __post_init__(self):
        if self.tp < 1 or self.world % self.tp:
            raise ConfigError(f"{TP_KEY}={self.tp} must divide the actor pool's {self.world} workers "
                              "(trainer.n_gpus_per_node * trainer.nnodes): one engine spans that many of them")

    @property
    def num_engines(self) -> int:
        """The engines' data-parallel size."""
        return self.world // self.tp

    def engine_of(self, rank: int) -> int:
        return rank // self.tp

    def ranks_of(self, engine: int) -> range:
        return range(engine * self.tp, (engine + 1) * self.tp)

    def leader(self, engine: int) -> int:
        """The rank whose responses are kept."""
        return engine * self.tp

    def is_leader(self, rank: int) -> bool:
        return rank % self.tp == 0

    def per_rank(self, per_engine: Sequence[T]) -> list[T]:
        """One item per engine (e.g. its prompt shard) -> one per rank: every rank of an engine gets its engine's."""
        if len(per_engine) != self.num_engines:
            raise ValueError(f"{len(per_engine)} items for {self.num_engines} engines")
        return [per_engine[self.engine_of(r)] for r in range(self.world)]

    def leaders_only(self, per_rank: Sequence[T]) -> list[T]:
        """The results of every rank -> those of the leaders, in engine order."""
        return [per_rank[self.leader(e)] for e in range(self.num_engines)]


@dataclass(frozen=True)
class RolloutSeat:
    """One worker's place among the pool's engines: its rank in the pool and on its node, and the CPU
    cores its share of an engine may use (rank_cores; (): every core the process may use)."""

    rank: int = 0
    local_rank: int = 0
    cores: tuple[int, ...] = ()


ONE_PROCESS = RolloutSeat()


def check_within_nodes(layout: RolloutLayout, node_of_rank: Sequence[str]) -> None:
    """An engine's ranks talk at every layer: they must share a node (verl's rule too)."""
    for e in range(layout.num_engines):
        nodes = {node_of_rank[r] for r in layout.ranks_of(e)}
        if len(nodes) > 1:
            ranks = list(layout.ranks_of(e))
            raise ConfigError(f"{TP_KEY}={layout.tp}: ranks {ranks[0]}-{ranks[-1]} of the actor pool form one engine "
                              f"but Ray placed them on {len(nodes)} nodes; make trainer.n_gpus_per_node a multiple of "
                              f"{TP_KEY} with every node's workers together, or lower {TP_KEY}")


def local_rank(rank: int, node_of_rank: Sequence[str]) -> int:
    """How many lower ranks share this rank's node: its index among the pool's workers there."""
    return sum(1 for r in range(rank) if node_of_rank[r] == node_of_rank[rank])


def rank_cores(local: int, threads: int, cores: Sequence[int]) -> tuple[int, ...]:
    """The `threads` cores of the node's `local`-th worker among the `cores` the process may use (its
    share, as Ray counts CPUs: worker i gets cores i*threads .. i*threads+threads-1). Where the Ray
    cluster claims more CPUs than the node has, the shares wrap around and overlap."""
    cores = sorted(cores)
    if not cores:
        return ()
    return tuple(sorted({cores[(local * threads + i) % len(cores)] for i in range(max(1, threads))}))


def core_slots_after(node_of_rank: Sequence[str], taken: Mapping[str, int]) -> list[int]:
    """Each rank's share index on its node (rank_cores' `local`) for a pool started after others on the same nodes
    (the async rollout pool): `taken[node]` workers of the earlier pools hold that node's first shares, so this
    pool's ranks take the next ones and no two engines bind to one core where the node has enough cores."""
    return [taken.get(node, 0) + local_rank(r, node_of_rank) for r, node in enumerate(node_of_rank)]
