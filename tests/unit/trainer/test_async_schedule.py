"""The one asynchronous schedule (trainer/async_schedule.py), decision by decision, against cases worked out by hand:
which batches the staleness bound lets start after each push, after which steps the weights are pushed, a batch's
lag and its π_old. Both asynchronous sources take these decisions from it (test_async_rollout.py and
test_agent_async_source.py check the pool calls they make of them)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hybridrl.trainer.async_schedule import AsyncSchedule


def trace(total: int, sync_every: int, ahead: int, reaches_started: bool, first: int = 1) -> tuple[list, list]:
    """Drives the schedule as a source does (push, start what the bound allows, train a step, maybe push):
    (the pushed versions, per push the steps it let start)."""
    s = AsyncSchedule(total_steps=total, sync_every=sync_every, ahead=ahead, prox=False,
                      reaches_started=reaches_started)
    pushes, started = [], []

    def push(version: int) -> None:
        s.pushed(version)
        pushes.append(version)
        now = []
        while s.may_start(s.next_step):
            now.append(s.next_step)
            s.started(s.next_step)
        started.append(now)

    push(s.start(first))
    for step in range(first, total + 1):
        if s.push_due(step):
            push(step)
    return pushes, started


def test_staleness_0_trigger_1_pushes_after_every_step_but_the_last_either_way():
    # B = 1: push v releases step v + 1 only; after step 3 (the last) nothing is left to use a push
    for reaches in (False, True):
        assert trace(total=3, sync_every=1, ahead=1, reaches_started=reaches) == ([0, 1, 2], [[1], [2], [3]])


def test_one_step_off_token_batches_skip_the_push_that_no_batch_can_take():
    # B = 2, 4 steps: push 0 releases steps 1-2, push 1 step 3, push 2 step 4: every batch is submitted, so
    # step 3's push (version 3) would reach no one-call batch and is not made
    assert trace(total=4, sync_every=1, ahead=2, reaches_started=False) == ([0, 1, 2], [[1, 2], [3], [4]])


def test_one_step_off_agents_also_push_into_the_step_in_flight():
    # the same run with agents: after step 3, step 4's agents have started (on version 2) but their later engine
    # calls can take version 3, so it is pushed; after step 4 (the last) nothing is left
    assert trace(total=4, sync_every=1, ahead=2, reaches_started=True) == ([0, 1, 2, 3], [[1, 2], [3], [4], []])


def test_trigger_2_pushes_every_other_step_and_staleness_1_stops_early_for_token_batches():
    # staleness 0, trigger 2: B = 2 (windows of two batches from the window's first weights): pushes 0, 2, 4
    assert trace(total=6, sync_every=2, ahead=2, reaches_started=False) == ([0, 2, 4], [[1, 2], [3, 4], [5, 6]])
    # staleness 1, trigger 2: B = 4. Push 0 releases 1-4, push 2 releases 5-6 (all 6 started): push 4 is skipped
    # for token batches; agents get it (steps 5-6 may still be running), and never one after the last step
    assert trace(total=6, sync_every=2, ahead=4, reaches_started=False) == ([0, 2], [[1, 2, 3, 4], [5, 6]])
    assert trace(total=6, sync_every=2, ahead=4, reaches_started=True) == ([0, 2, 4], [[1, 2, 3, 4], [5, 6], []])


def test_a_resume_starts_from_the_checkpoint_weights():
    # resumed after step 2's checkpoint of a 4-step one-step-off run: version 2 first, releasing steps 3-4
    assert trace(total=4, sync_every=1, ahead=2, reaches_started=False, first=3) == ([2], [[3, 4]])
    # trigger 2 resumed from step 3: version 3 (not a multiple of the trigger) first, then pushes at steps 4, 6
    assert trace(total=7, sync_every=2, ahead=2, reaches_started=False, first=4) == ([3, 4, 6], [[4, 5], [6], [7]])


def test_the_bound_and_the_run_end_decide_which_step_may_start():
    s = AsyncSchedule(total_steps=5, sync_every=1, ahead=2, prox=False)
    s.pushed(2)
    # version 2 with B = 2: steps up to 4 (4 - 2 = 2 <= 2); 5 needs version 3; 6 is past the run
    assert [s.may_start(k) for k in (1, 4, 5, 6)] == [True, True, False, False]


@pytest.mark.parametrize("versions, lag", [([4], 0), ([2], 2), ([4, 3, 4], 1), ([], 0)])
def test_the_lag_is_the_oldest_versions(versions, lag):
    # step 5 updates the weights of version 4: a batch of version 4 is on-policy; one of turns on 4, 3, 4 is 1 behind
    assert AsyncSchedule(total_steps=9, sync_every=1, ahead=2, prox=False).lag(5, versions) == lag


def test_the_behaviour_policy_of_a_lagged_batch():
    rollout, prox = (AsyncSchedule(total_steps=9, sync_every=1, ahead=2, prox=p) for p in (False, True))
    assert [rollout.behaviour(0), rollout.behaviour(1), prox.behaviour(0), prox.behaviour(2)] == [
        None, "rollout", None, "prox"]


def test_of_config_takes_verls_bound():
    a = SimpleNamespace(trigger_parameter_sync_step=2, staleness_threshold=0.5, compute_prox_log_prob=True)
    s = AsyncSchedule.of_config(a, total_steps=8, reaches_started=True)
    # floor((1 + 0.5) x 2) = 3 batches per sync window
    assert (s.total_steps, s.sync_every, s.ahead, s.prox, s.reaches_started) == (8, 2, 3, True, True)
