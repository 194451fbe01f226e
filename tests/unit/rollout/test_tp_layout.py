"""The rollout engines' layout over a Ray pool (rollout/tp_layout.py): tp consecutive ranks per engine, every
rank of an engine fed its engine's prompts, the leaders' responses kept; engines within a node; each worker's
own CPU cores."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from hybridrl.errors import ConfigError
from hybridrl.rollout.tp_layout import RolloutLayout, check_within_nodes, core_slots_after, local_rank, rank_cores

TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def test_eight_ranks_in_engines_of_two_consecutive_ranks():
    layout = RolloutLayout(world=8, tp=2)
    assert layout.num_engines == 4  # the engines' data-parallel size: world / tp
    assert [list(layout.ranks_of(e)) for e in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [layout.engine_of(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [layout.leader(e) for e in range(4)] == [0, 2, 4, 6]
    assert [r for r in range(8) if layout.is_leader(r)] == [0, 2, 4, 6]


def test_every_rank_of_an_engine_gets_its_engines_prompts_and_only_leaders_answer():
    layout = RolloutLayout(world=6, tp=3)
    assert layout.per_rank(["rows 0-4", "rows 5-9"]) == ["rows 0-4"] * 3 + ["rows 5-9"] * 3
    # what each rank returned (its engine's responses); the leaders' are kept, in engine (= prompt) order
    assert layout.leaders_only(["a0", "a1", "a2", "b0", "b1", "b2"]) == ["a0", "b0"]
    with pytest.raises(ValueError, match="3 items for 2 engines"):
        layout.per_rank([1, 2, 3])


def test_without_tensor_parallel_every_rank_is_an_engine_and_a_leader():
    layout = RolloutLayout(world=3)
    assert layout.num_engines == 3 and layout.per_rank(["x", "y", "z"]) == ["x", "y", "z"]
    assert layout.leaders_only([1, 2, 3]) == [1, 2, 3]


@pytest.mark.parametrize("world,tp", [(6, 4), (3, 2), (4, 0)])
def test_tp_must_divide_the_pool(world, tp):
    with pytest.raises(ConfigError, match=re.escape(f"{TP_KEY}={tp} must divide the actor pool's {world} workers")):
        RolloutLayout(world, tp)


def test_an_engine_split_over_two_nodes_is_refused_naming_its_ranks():
    check_within_nodes(RolloutLayout(4, 2), ["a", "a", "b", "b"])
    check_within_nodes(RolloutLayout(4, 1), ["a", "b", "a", "b"])  # one rank per engine: anything goes
    with pytest.raises(ConfigError, match=re.escape(f"{TP_KEY}=2: ranks 0-1 of the actor pool form one engine but "
                                                    "Ray placed them on 2 nodes")):
        check_within_nodes(RolloutLayout(4, 2), ["a", "b", "a", "b"])


def test_local_rank_counts_the_lower_ranks_on_the_same_node():
    nodes = ["a", "b", "a", "a", "b"]
    assert [local_rank(r, nodes) for r in range(5)] == [0, 0, 1, 2, 1]


def test_workers_of_a_node_get_distinct_cores():
    # issue #24: two workers on a 2-core machine must not both bind their engine threads to cores 0-1
    assert [rank_cores(i, 1, [0, 1]) for i in range(2)] == [(0,), (1,)]
    assert [rank_cores(i, 2, [4, 5, 6, 7]) for i in range(2)] == [(4, 5), (6, 7)]  # the process's cores, in order
    assert rank_cores(0, 2, [3, 1]) == (1, 3)
    # a Ray cluster that claims more CPUs than there are: the shares wrap around (and overlap)
    assert [rank_cores(i, 1, [0, 1]) for i in range(3)] == [(0,), (1,), (0,)]
    assert rank_cores(0, 0, [0, 1]) == (0,) and rank_cores(0, 1, []) == ()


def test_the_rollout_pools_engines_take_the_cores_after_the_trainers_on_each_node():
    # async: 2 trainer workers on node a, 1 on b; the rollout pool's ranks continue after them on their own node
    assert core_slots_after(["a", "b", "a"], {"a": 2, "b": 1}) == [2, 1, 3]
    assert core_slots_after(["c"], {"a": 2}) == [0]  # a node with no trainer worker starts at its first share
    # 1 trainer + 1 rollout worker of one core each on a 2-core node: never both engines on one core
    trainer, rollout = rank_cores(0, 1, [0, 1]), rank_cores(core_slots_after(["a"], {"a": 1})[0], 1, [0, 1])
    assert (trainer, rollout) == ((0,), (1,))


def test_a_rollout_worker_seats_its_engine_on_its_slots_cores(monkeypatch):
    from hybridrl.distributed.rollout_worker import RolloutWorker

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    worker = RolloutWorker(SimpleNamespace(async_training=SimpleNamespace(partial_rollout=False)), None, 1, 3, 4, 2)
    seat = worker.seat(1)
    assert (seat.rank, seat.local_rank, seat.cores) == (3, 0, (2, 3))
