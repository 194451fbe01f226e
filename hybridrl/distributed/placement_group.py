"""Ray placement groups of a run's workers.

Over several nodes (spread_over_nodes): a pool laid out as n_gpus_per_node x nnodes gets one STRICT_SPREAD
placement group, one bundle per node holding that node's workers, and rank r goes into bundle r // n_gpus_per_node.
So the layout `plan` prints ("worker r (node i)") is where the workers run: left to itself, Ray alternated the
ranks of 2 x 2 between the nodes (0 and 2 on one; tests/integration/test_ray_placement.py), and it may pack a
pool onto one node that has the CPUs (verl pins its pools to nodes the same way, a placement group per pool).

Inside a sweep trial with trainer.backend=ray (sweep/resources.trial_bundles gives its bundles: the driver's first,
then one per worker): Tune starts the trial's driver in bundle 0 with placement_group_capture_child_tasks, so the
workers RayRoles creates land in the other bundles; the driver checks that every worker did (a worker outside
would take a core another trial reserved), and gives the workers the placement group's cores, not the whole
cluster's, to count their torch threads from. The trial's group holds the workers there: no group of their own.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Optional, Sequence

from hybridrl.plan.placement import LAYOUT_SECTION, per_node
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError, HybridRLError


def worker_cpus() -> int:
    """CPUs the workers may take: the Ray cluster's, or inside a placement group its bundles' but the first (the
    driver's)."""
    import ray
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    if group is None:
        return int(ray.cluster_resources().get("CPU", 0))
    return int(sum(bundle.get("CPU", 0) for bundle in group.bundle_specs[1:]))


def driver_placement_group() -> Optional[str]:
    """The id of the placement group this process runs in and whose bundles its child actors take (a sweep
    trial's), or None. A group that does not capture child actors is None here: the workers are not in it."""
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    return None if group is None else group.id.hex()


def check_same_group(driver: Optional[str], workers: Mapping[str, Sequence[Optional[str]]]) -> None:
    """Every worker ({pool: each rank's placement group id}) runs in the driver's placement group (None: none)."""
    outside = [f"{pool} rank {rank} ({group or 'none'})" for pool, groups in workers.items()
               for rank, group in enumerate(groups) if group != driver]
    if outside:
        raise HybridRLError(f"worker(s) {', '.join(outside)} are not in the run's placement group ({driver}); Ray "
                            "did not capture them, so they would take cores the sweep reserved for other trials "
                            "(report this: the Ray version may schedule child actors differently)")


class PoolPlacement:
    """Where one pool's ranks go: each into its node's bundle of the pool's own group (spread_over_nodes), or, with
    no group, wherever Ray (or a sweep trial's group) puts them."""

    def __init__(self, cfg: RLConfig, pool: str, world: int, gpus: int):
        n = per_node(cfg).get(pool)
        self.per_node = n or 1
        self.group = None if n is None else spread_over_nodes(pool, world, n, gpus, LAYOUT_SECTION[pool],
                                                              cfg.trainer.worker_timeout_s)

    def options(self, rank: int) -> dict:
        """Ray actor options that put `rank` into its node's bundle (none without a group)."""
        if self.group is None:
            return {}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            self.group, placement_group_bundle_index=rank // self.per_node)}

    def expected(self, driver: Optional[str]) -> Optional[str]:
        """The placement group id every rank must report: the pool's own, else the driver's (None: none)."""
        return self.group.id.hex() if self.group is not None else driver

    def remove(self) -> None:
        """Gives the nodes' reserved CPUs (GPUs) back; the cluster may be gone with a node already."""
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):  # a lost node or a shut-down cluster: nothing left to give back
                remove_placement_group(self.group)
            self.group = None


def spread_over_nodes(pool: str, size: int, per_node: int, gpus: int, section: str, wait_s: float):
    """The placement group that puts `pool`'s ranks on size // per_node different nodes (bundle i: node i's
    per_node workers, each 1 CPU and `gpus` GPU), or None where there is nothing to spread: one node in the
    pool's layout and in the cluster, or a sweep trial (its own group holds the workers). `section` names the
    pool's keys in errors (trainer, critic, ...). Refuses at once a cluster with too few nodes able to host a
    node's workers, and after `wait_s` one whose nodes stay too busy to."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    nodes = size // per_node
    alive = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if driver_placement_group() is not None or (nodes == 1 and len(alive) == 1):
        return None
    bundle = {"CPU": per_node, **({"GPU": per_node * gpus} if gpus else {})}
    able = [r for r in alive if all(r.get(k, 0) >= v for k, v in bundle.items())]
    layout = f"{section}.n_gpus_per_node={per_node} x {section}.nnodes={nodes}"
    need = " + ".join(f"{v} {k}" for k, v in bundle.items())
    where = "on one node" if nodes == 1 else f"on each of {nodes} different nodes"
    if len(able) < nodes:
        raise ConfigError(f"the {pool} pool ({layout}) needs {need} {where}; the Ray "
                          f"cluster has {len(alive)} alive node(s), {len(able)} with that much ({_per_node(alive)}): "
                          f"start Ray on more nodes (ray start --address=...), give them more CPUs (--num-cpus), or "
                          f"lower {section}.nnodes / {section}.n_gpus_per_node")
    group = placement_group([dict(bundle) for _ in range(nodes)], strategy="STRICT_SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=wait_s)
    if not ready:
        remove_placement_group(group)
        raise ConfigError(f"the {pool} pool ({layout}) needs {need} free {where}; Ray "
                          f"could not reserve them within {wait_s:.0f} s (trainer.worker_timeout_s): other jobs hold "
                          f"them ({_per_node(alive)}); wait for them, or lower {section}.nnodes")
    return group


def _per_node(resources: list[dict]) -> str:
    return "CPUs per node: " + ", ".join(f"{r.get('CPU', 0):g}" for r in resources) + (
        "; GPUs per node: " + ", ".join(f"{r.get('GPU', 0):g}" for r in resources)
        if any(r.get("GPU") for r in resources) else "")
