"""How many trials run at once, derived from what one trial needs and what the machine has; never guessed.

A trial (trainer.backend=local) is one process: it needs 1 CPU core at least (the cores left over when fewer
trials than cores run at once are shared out among them as torch threads), 1 GPU when trainer.device=cuda, and
the memory `plan` estimates (plan/memory.py: its peak, over the pools, times their workers). Concurrency is
the smallest of cores / cores per trial, GPUs / GPUs per trial, and RAM / memory per trial (host memory bounds
CPU trials; on GPUs the estimate is GPU memory, which one trial per GPU bounds already).

A trial with trainer.backend=ray is several processes: its driver and the workers of every pool (plan/placement's
pool_sizes, the count `plan` shows). Tune gives it a placement group of one bundle per process (`trial_bundles`),
which Ray reserves whole before the trial starts; the trial's workers are created inside it (Tune captures the
trial's child actors in its placement group), so each of them counts against the cores, GPUs and memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hybridrl.plan.memory import fmt_bytes


@dataclass(frozen=True)
class Machine:
    cores: int
    gpus: int
    ram_bytes: int


@dataclass(frozen=True)
class TrialNeeds:
    cpus: int
    gpus: int
    memory_bytes: int  # plan's peak estimate: host RAM on CPU, one GPU's memory on cuda
    device: str


@dataclass(frozen=True)
class Concurrency:
    trials: int  # at most this many trials at once
    why: str  # the derivation, printed at the start of a sweep

    def threads(self, machine: Machine) -> int:
        """Cores each trial's torch threads get: the machine's cores shared by the trials that run at once (one
        trial alone on 8 cores uses them all; 3 trials on 2 cores run 2 at a time, 1 core each)."""
        return max(1, machine.cores // max(1, self.trials))


def this_machine() -> Machine:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Machine(cores, torch.cuda.device_count() if torch.cuda.is_available() else 0, ram)


def cluster_machine() -> Machine:
    """The joined Ray cluster as one machine: its CPUs and GPUs, and the memory Ray offers tasks on all its nodes
    (a sweep whose base names ray_kwargs.ray_init.address spreads its trials over the nodes)."""
    import ray

    total = ray.cluster_resources()
    return Machine(int(total.get("CPU", 0)), int(total.get("GPU", 0)), int(total.get("memory", 0)))


def trial_bundles(cfg) -> list[dict[str, int]]:
    """The placement-group bundles of one trial of `cfg` (a validated config): one {CPU: 1} for the trial's own
    process (the whole run with trainer.backend=local; the driver with ray, which holds no GPU), then with ray one
    {CPU: 1, GPU: g} per worker of every pool (g = 1 on cuda), as group.WorkerPool creates them."""
    from hybridrl.plan.placement import pool_sizes

    gpu = int(cfg.trainer.device == "cuda")
    if cfg.trainer.backend == "local":
        return [{"CPU": 1, "GPU": gpu}]
    return [{"CPU": 1, "GPU": 0}] + [{"CPU": 1, "GPU": gpu} for _ in range(sum(pool_sizes(cfg).values()))]


def trial_needs(cfg, plan) -> TrialNeeds:
    """What one trial of `cfg` needs (a validated config and its batch plan): its bundles' CPUs and GPUs, and the
    peak memory of its processes (with ray, the driver's runtime beside the workers')."""
    from hybridrl.plan.memory import RUNTIME_BYTES, estimate_memory

    pools = estimate_memory(cfg, plan).pools
    memory = sum(p.peak_bytes * p.workers for p in pools)
    if cfg.trainer.backend != "local" and cfg.trainer.device == "cpu" and not any(
            p.name.startswith("driver") for p in pools):  # a driver holding the reward model is a pool already
        memory += RUNTIME_BYTES
    bundles = trial_bundles(cfg)
    return TrialNeeds(cpus=sum(b["CPU"] for b in bundles), gpus=sum(b["GPU"] for b in bundles),
                      memory_bytes=memory, device=cfg.trainer.device)


def largest_needs(needs: list[TrialNeeds]) -> TrialNeeds:
    """The most any of the configs needs, resource by resource (the swept values change the memory)."""
    return TrialNeeds(max(n.cpus for n in needs), max(n.gpus for n in needs), max(n.memory_bytes for n in needs),
                      needs[0].device)


def derive_concurrency(need: TrialNeeds, machine: Machine, trials: int | None = None,
                       cap: int | None = None) -> Concurrency:
    """min(cores / cpus, GPUs / gpus, RAM / memory, `trials`) trials at once (`trials`: the number the sweep makes,
    None when unbounded) and the sweep file's `cap` (max_concurrent); 0 when a trial does not fit at all. `why`
    shows every bound."""
    bounds = {f"{machine.cores} cores / {need.cpus} per trial": machine.cores // need.cpus}
    if need.gpus:
        bounds[f"{machine.gpus} GPUs / {need.gpus} per trial"] = machine.gpus // need.gpus
    if need.device == "cpu":
        bounds[f"{fmt_bytes(machine.ram_bytes)} RAM / {fmt_bytes(need.memory_bytes)} per trial (plan's estimate)"] = \
            machine.ram_bytes // max(1, need.memory_bytes)
    if trials is not None:
        bounds[f"{trials} trials in the sweep"] = trials
    if cap is not None:
        bounds["max_concurrent in the sweep file"] = cap
    limit, n = min(bounds.items(), key=lambda kv: kv[1])
    if n < 1:
        return Concurrency(0, f"a trial needs more than the machine has: {limit} = {n}")
    text = "; ".join(f"{k} = {v}" for k, v in bounds.items())
    return Concurrency(n, f"{n} trial(s) at once, the smallest of: {text}")
