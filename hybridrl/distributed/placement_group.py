"""The workers of a run that is itself inside a Ray placement group: a `hybridrl sweep` trial with
trainer.backend=ray (sweep/resources.trial_bundles gives its bundles: the driver's first, then one per worker).

Tune starts the trial's driver in bundle 0 with placement_group_capture_child_tasks, so the workers RayRoles
creates (ray.remote(...).options(num_cpus=1, ...), no strategy of their own) land in the other bundles; the
driver checks that every worker did (a worker outside would take a core another trial reserved), and gives the
workers the placement group's cores, not the whole cluster's, to count their torch threads from.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from hybridrl.errors import HybridRLError


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
