"""The search space in Tune's terms, and the concurrency derivation, with hand-worked numbers."""

import pytest

from hybridrl.plan.memory import MIB
from hybridrl.sweep.resources import Machine, TrialNeeds, derive_concurrency, largest_needs
from hybridrl.sweep.space import grid_size, parse_entry

GIB = 1024 * MIB


def entry(key, raw):
    e, problem = parse_entry(key, raw)
    assert problem is None
    return e


def test_each_kind_becomes_its_tune_domain():
    pytest.importorskip("ray")
    from ray.tune.search.sample import Categorical, Float, Integer

    from hybridrl.sweep.space import to_tune

    space = to_tune([entry("a", {"choice": [1, 2]}), entry("b", {"grid": [3, 4]}), entry("c", {"uniform": [0.1, 0.2]}),
                     entry("d", {"loguniform": [1e-6, 1e-4]}), entry("e", {"randint": [2, 4]})])
    assert list(space) == ["a", "b", "c", "d", "e"]  # flat: the dotted config keys stay whole
    assert isinstance(space["a"], Categorical) and space["a"].categories == [1, 2]
    assert space["b"] == {"grid_search": [3, 4]}
    assert isinstance(space["c"], Float) and (space["c"].lower, space["c"].upper) == (0.1, 0.2)
    assert isinstance(space["d"].sampler, Float._LogUniform) and (space["d"].lower, space["d"].upper) == (1e-6, 1e-4)
    # our [lo, hi] includes hi; Tune's randint excludes its upper bound, so 4 becomes 5
    assert isinstance(space["e"], Integer) and (space["e"].lower, space["e"].upper) == (2, 5)
    draws = {space["e"].sample() for _ in range(200)}
    assert draws == {2, 3, 4}


def test_the_grid_size_is_the_product_of_the_grid_entries():
    # 3 x 2 grid values; a choice entry is drawn, not crossed
    entries = [entry("a", {"grid": [1, 2, 3]}), entry("b", {"grid": [1, 2]}), entry("c", {"choice": [1, 2]})]
    assert grid_size(entries) == 6
    assert grid_size([entry("c", {"uniform": [0, 1]})]) == 1


def test_concurrency_is_bound_by_the_scarcest_resource():
    machine = Machine(cores=8, gpus=0, ram_bytes=16 * GIB)
    # 8 cores / 1 = 8; 16 GiB / 3 GiB = 5 (5.33 rounded down): memory binds
    got = derive_concurrency(TrialNeeds(cpus=1, gpus=0, memory_bytes=3 * GIB, device="cpu"), machine, trials=12)
    assert got.trials == 5 and got.why == ("5 trial(s) at once, the smallest of: 8 cores / 1 per trial = 8; "
                                           "16.00 GiB RAM / 3.00 GiB per trial (plan's estimate) = 5; "
                                           "12 trials in the sweep = 12")
    assert got.threads(machine) == 1  # 8 cores // 5 trials
    # 600 MiB: 16 GiB / 600 MiB = 27, so the 8 cores bind
    got = derive_concurrency(TrialNeeds(1, 0, 600 * MIB, "cpu"), machine, trials=12)
    assert got.trials == 8 and "16.00 GiB RAM / 600.0 MiB per trial (plan's estimate) = 27;" in got.why
    # 3 trials in the sweep: 3 at once, and each gets 8 // 3 = 2 cores of torch threads
    got = derive_concurrency(TrialNeeds(1, 0, 600 * MIB, "cpu"), machine, trials=3)
    assert (got.trials, got.threads(machine)) == (3, 2)


def test_on_gpus_a_trial_takes_one_and_host_ram_does_not_bind():
    machine = Machine(cores=16, gpus=2, ram_bytes=8 * GIB)
    got = derive_concurrency(TrialNeeds(1, 1, 40 * GIB, "cuda"), machine, trials=10)
    assert got.trials == 2 and "2 GPUs / 1 per trial = 2" in got.why and "RAM" not in got.why


def test_a_trial_larger_than_the_machine_gives_zero():
    got = derive_concurrency(TrialNeeds(1, 0, 9 * GIB, "cpu"), Machine(2, 0, 8 * GIB), trials=4)
    assert got.trials == 0 and "8.00 GiB RAM / 9.00 GiB per trial (plan's estimate) = 0" in got.why


def test_the_largest_need_is_taken_per_resource():
    needs = [TrialNeeds(1, 0, 2 * GIB, "cpu"), TrialNeeds(2, 0, 1 * GIB, "cpu")]
    assert largest_needs(needs) == TrialNeeds(2, 0, 2 * GIB, "cpu")


def test_the_sweep_files_max_concurrent_caps_the_derived_bound():
    got = derive_concurrency(TrialNeeds(1, 0, 600 * MIB, "cpu"), Machine(8, 0, 16 * GIB), trials=12, cap=3)
    assert got.trials == 3 and got.why.endswith("; max_concurrent in the sweep file = 3")
    assert got.threads(Machine(8, 0, 16 * GIB)) == 2  # 8 cores // 3 trials


def test_a_sweep_takes_the_memory_of_its_largest_swept_value(default_data_cwd):  # the base's data files exist
    from hybridrl.plan.memory import fmt_bytes
    from hybridrl.sweep.check import load_trial_config
    from hybridrl.sweep.driver import derive
    from hybridrl.sweep.resources import trial_needs
    from hybridrl.sweep.spec import parse_sweep

    key = "data.max_response_length"  # longer responses: more activations in the update
    spec = parse_sweep({"space": {key: {"grid": [8, 64, 16]}}, "metric": "critic/score/mean", "mode": "max",
                        "output": "unused"})
    plans = {n: load_trial_config(spec.base, {key: n}) for n in (8, 16, 64)}
    sizes = {n: trial_needs(p.config, p.batch).memory_bytes for n, p in plans.items()}
    assert sizes[8] < sizes[64] and sizes[16] < sizes[64]  # the largest is not the first value, the base's probe
    got, *_ = derive(spec, log=lambda _: None)
    assert f"/ {fmt_bytes(sizes[64])} per trial (plan's estimate)" in got.why
