"""The `resume` check's async part (check/resume_async.py): on tiny-arith with a Ray rollout pool, the README's
in-flight buffer policy holds at staleness 0 (the resumed run equals the uninterrupted one) and at staleness 1 (the
first resumed batch has lag 0, the next one lag 1 as usual); a resume that keeps the stale version of the batch in
flight (seeded in our own AsyncRollouts.start) is ✗ naming the step and the part of the policy. The verdicts are
also unit-tested on fabricated metrics rows and dumps."""

from __future__ import annotations

import copy
import importlib.util

import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.resume_async import in_flight_policy, same_prompts, versions_equal
from hybridrl.check.result import FAIL, NA, PASS

# the Ray runs: slow, and skipped where Ray is missing (the `cluster` fixture imports it; the n/a is tested below)
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
RAY_CPUS = 2  # the `cluster` fixture's size (tests/conftest.py): one trainer worker + one rollout worker
ASYNC = ["trainer.backend=ray", "rollout.n_gpus_per_node=1", "rollout.nnodes=1"]


def context(tmp_path, arith_data, *overrides: str) -> CheckContext:
    return CheckContext(None, ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
                               f"data.val_files=[{arith_data['val']}]", *ASYNC, *overrides], str(tmp_path / "work"))


def text(results) -> str:
    return "\n".join(line for r in results for line in [r.summary, *r.details])


@pytest.mark.slow
@needs_ray
def test_staleness_0_the_whole_resume_check_passes_and_the_resumed_async_run_equals_the_uninterrupted_one(
        tmp_path, arith_data, cluster):
    import hybridrl.check.resume  # noqa: F401  (registers the check)
    from hybridrl.check.registry import CHECKS
    from hybridrl.check.runner import _run_one

    r = _run_one(CHECKS.entry("resume"), context(tmp_path, arith_data))  # as `hybridrl check` runs it
    assert r.status == PASS, r
    out = "\n".join([r.summary, *r.details])
    assert "(async rollouts: the in-flight buffer policy holds)" in r.summary
    assert "resumed from step 2 (epoch 0, sample 2) and trained step 3" in out  # the synchronous part
    assert "async rollouts: resumed from step 2 (epoch 0, sample 2) and trained steps 3-4" in out
    assert ("async rollouts: the resumed run pushed version 2 (the checkpoint's step); step 3's batch was regenerated "
            "from the checkpoint's weights (version 2, as in the uninterrupted run): lag 0") in out
    assert "from then on as usual: step 4 lag 0 (uninterrupted 0)" in out
    assert ("async rollouts: steps 3-4 generated for the uninterrupted run's prompts, row for row; the same responses "
            "in step(s) 3, 4") in out
    assert "async rollouts: the same " in out and " metric values in steps 1-4 (timings aside)" in out
    assert out.count("max |difference| 0)") == 2  # the synchronous and the async run's final weights
    print(out)


@pytest.mark.slow
@needs_ray
def test_staleness_1_drops_the_batch_in_flight_at_the_checkpoint(tmp_path, arith_data, cluster):
    from hybridrl.check.resume_async import async_part

    results = async_part(context(tmp_path, arith_data, "async_training.staleness_threshold=1"))
    out = text(results)
    assert [r.status for r in results] == [PASS] * 5, out
    assert ("the batch of step 3 in flight at step 2's checkpoint (version 1) was dropped and regenerated from the "
            "checkpoint's weights: lag 0") in out
    assert "from then on as usual: step 4 lag 1 (uninterrupted 1)" in out
    assert "the same responses in step(s) 4" in out  # step 4: version 2 in both runs
    assert "differs from the uninterrupted one by design (it trains step 3 (version 2, uninterrupted 1) on fresher " \
           "batches)" in out
    print(out)


@pytest.mark.slow
@needs_ray
def test_a_resume_that_starts_the_pool_at_the_stale_version_fails_naming_the_step(tmp_path, arith_data, cluster,
                                                                                  monkeypatch):
    from hybridrl.check.resume_async import async_part
    from hybridrl.trainer.async_rollout import AsyncRollouts

    # seeded: the resumed run starts the pool at the version of the batch that was in flight at the checkpoint
    # (step - 2, as the uninterrupted run's batch of that step had), not at the checkpoint's
    def stale_start(self, first_step: int) -> None:
        self.lookahead = copy.deepcopy(self.sampler)
        self.schedule.start(first_step)
        self._push(first_step - 2 if first_step > 1 else 0)

    monkeypatch.setattr(AsyncRollouts, "start", stale_start)
    results = async_part(context(tmp_path, arith_data, "async_training.staleness_threshold=1"))
    bad = [r for r in results if r.status == FAIL]
    assert len(bad) == 1, text(results)
    assert "async rollouts, step 3: the resumed run pushed version 1 at its start, not the checkpoint's step 2" \
        in bad[0].summary
    assert "trainer.resume_mode=disable" in bad[0].fix
    print(text(results))


# ---- the verdicts on fabricated rows ---------------------------------------------------------------------------

def rows(lags: dict[int, int], pushed: dict[int, int]) -> dict[int, dict]:
    return {k: {"step": k, "async/staleness_max": float(lag), "async/version": float(pushed[k])}
            for k, lag in lags.items()}


UNINTERRUPTED = rows({1: 0, 2: 1, 3: 1, 4: 1}, {1: 0, 2: 1, 3: 2, 4: 3})  # staleness 1, trigger 1


def test_one_step_off_resumed_with_lag_0_then_as_usual_passes():
    r = in_flight_policy(UNINTERRUPTED, rows({3: 0, 4: 1}, {3: 2, 4: 3}), 2, 4, partial=False)
    assert r.status == PASS, r
    assert not versions_equal(UNINTERRUPTED, 2, 4)  # step 3 changes version: the runs differ by design


def test_a_first_resumed_batch_with_lag_fails_naming_the_step():
    r = in_flight_policy(UNINTERRUPTED, rows({3: 1, 4: 1}, {3: 2, 4: 3}), 2, 4, partial=False)
    assert r.status == FAIL
    assert "step 3: the first resumed batch has lag 1 (version 1), not 0: the batch in flight at the kill was not " \
           "dropped" in r.summary


def test_a_later_batch_off_the_bound_fails_naming_the_step():
    r = in_flight_policy(UNINTERRUPTED, rows({3: 0, 4: 0}, {3: 2, 4: 3}), 2, 4, partial=False)
    assert r.status == FAIL
    assert "step 4: after the first resumed batch, the batch has version 3 (lag 0), where the staleness bound from " \
           "the checkpoint's push gives version 2 (lag 1" in r.summary
    # partial rollouts: a push may reach a generation in flight, so a fresher version is allowed
    assert in_flight_policy(UNINTERRUPTED, rows({3: 0, 4: 0}, {3: 2, 4: 3}), 2, 4, partial=True).status == PASS


def test_other_prompts_or_other_draws_fail_naming_the_step():
    a = {3: [{"index": 4, "input": "1+1=", "output": "2"}], 4: [{"index": 6, "input": "2+2=", "output": "4"}]}
    same = rows({3: 0, 4: 0}, {3: 2, 4: 3})
    assert same_prompts(a, a, same, same, 2, 4, partial=False).status == PASS
    other = {3: a[3], 4: [{"index": 7, "input": "3+3=", "output": "4"}]}
    r = same_prompts(a, other, same, same, 2, 4, partial=False)
    assert r.status == FAIL and "step 4: the resumed run generated for other prompts" in r.summary
    assert "row 0: index 7 resumed, 6 uninterrupted" in r.summary
    drawn = {3: [{"index": 4, "input": "1+1=", "output": "3"}], 4: a[4]}
    r = same_prompts(a, drawn, same, same, 2, 4, partial=False)
    assert r.status == FAIL and "step 3: the same prompts and weights (version 2) gave other responses" in r.summary
    assert "the draw keys are not the uninterrupted run's" in r.summary


def test_without_ray_the_async_part_is_not_applicable(tmp_path, arith_data, monkeypatch):
    import builtins

    from hybridrl.check.resume_async import async_part

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    [r] = async_part(context(tmp_path, arith_data))
    assert r.status == NA
    assert "async rollouts: the in-flight buffer policy needs Ray, which does not import here" in r.summary
