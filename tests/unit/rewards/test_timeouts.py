"""reward_model.timeout_s holds whatever the batch size: in the trainer process (num_workers=0) and in
the pool, per sample and for a batched function, a batch ends within about timeout_s of its first hang
(issue #22: a hanging scorer hung the run with num_workers=0, and took 57 s to report with
timeout_s=3 in the pool because the timeouts added up sample after sample)."""

from __future__ import annotations

import signal
import textwrap
import time

import pytest

from hybridrl.errors import HybridRLError
from hybridrl.rewards.pool import NOT_SCORED, FunctionRef, ScoringPool, alarm

SCORERS = textwrap.dedent(r'''
    import re
    import time

    def sleeps(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "hang":
            time.sleep(600)
        return 1.0

    def spins(data_source, solution_str, ground_truth, extra_info=None):
        while solution_str == "hang":  # pure Python, never sleeps
            pass
        return 1.0

    def backtracks(data_source, solution_str, ground_truth, extra_info=None):
        # catastrophic backtracking: hours in the regex engine (which holds the GIL)
        return float(bool(re.match(r"(a+)+$", "a" * 60 + "b"))) if solution_str == "hang" else 1.0

    def swallows(data_source, solution_str, ground_truth, extra_info=None):
        try:
            time.sleep(600 if solution_str == "hang" else 0)
        except Exception:  # a scorer's own broad except must not swallow the timeout
            return 0.5
        return 1.0

    def batched_sleeps(data_sources, solution_strs, ground_truths, extra_infos):
        if "hang" in solution_strs:
            time.sleep(600)
        return [1.0] * len(solution_strs)
''')
TIMEOUT = 0.5


@pytest.fixture
def scorer_file(tmp_path):
    path = tmp_path / "scorers.py"
    path.write_text(SCORERS)
    return str(path)


def score(path, name, texts, workers, stop_on_error, batched=False):
    """(results, seconds) of one batch with timeout_s=TIMEOUT; the pool is closed afterwards."""
    pool = ScoringPool(FunctionRef(path, name, batched), num_workers=workers, timeout_s=TIMEOUT)
    start = time.monotonic()
    try:
        results = pool.score(["s"] * len(texts), texts, ["t"] * len(texts), [{}] * len(texts), stop_on_error)
        return results, time.monotonic() - start
    finally:
        pool.close()


@pytest.mark.parametrize("name", ["sleeps", "spins", "backtracks", "swallows"])
def test_in_process_scorers_are_stopped_at_the_timeout(scorer_file, name):
    results, seconds = score(scorer_file, name, ["ok", "hang", "ok"], workers=0, stop_on_error=False)
    assert seconds < TIMEOUT + 1.5  # each of these would run for minutes
    assert results[0].error is None and results[2].error is None
    assert results[1].score == 0.0 and "timed out after reward_model.timeout_s=0.5s" in results[1].error
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_hanging_batch_fails_within_the_timeout_whatever_its_size(scorer_file, workers):
    """40 hanging samples: the first failure ends the batch (on_error=raise); the old pool took
    40 / 2 workers x 0.5 s = 10 s, in-process the run hung."""
    results, seconds = score(scorer_file, "sleeps", ["hang"] * 40, workers, stop_on_error=True)
    assert seconds < TIMEOUT + 2.0
    assert "timed out" in results[0].error or "timed out" in results[1].error
    unscored = [r.error for r in results if r.error.startswith(NOT_SCORED)]
    assert len(unscored) >= 38 and set(unscored) == {f"{NOT_SCORED}: the batch stopped at its first failure"}


@pytest.mark.parametrize("workers", [0, 2])
def test_with_on_error_zero_timeouts_do_not_add_up(scorer_file, workers):
    """After a first timeout the rest of the batch gets timeout_s more: 2 x 0.5 s, not 40 x 0.5 s / workers.
    Healthy samples scored before the cap keep their scores."""
    texts = ["ok"] * 4 + ["hang"] * 40
    results, seconds = score(scorer_file, "sleeps", texts, workers, stop_on_error=False)
    assert seconds < 2 * TIMEOUT + 2.0
    assert [r.score for r in results[:4]] == [1.0] * 4 and all(r.error is None for r in results[:4])
    assert all(r.error is not None and r.score == 0.0 for r in results[4:])


@pytest.mark.parametrize("workers", [0, 1])
def test_a_batched_function_gets_timeout_s_for_its_one_call(scorer_file, workers):
    results, seconds = score(scorer_file, "batched_sleeps", ["ok"] * 20 + ["hang"], workers, stop_on_error=True,
                             batched=True)
    assert seconds < TIMEOUT + 2.0  # was timeout_s per sample: 21 x 0.5 s
    assert all("timed out after reward_model.timeout_s=0.5s (the batched call)" in r.error for r in results)


def test_the_pool_scores_normally_after_a_cancelled_batch(scorer_file):
    pool = ScoringPool(FunctionRef(scorer_file, "sleeps"), num_workers=2, timeout_s=TIMEOUT)
    try:
        pool.score(["s"] * 8, ["hang"] * 8, ["t"] * 8, [{}] * 8, stop_on_error=True)
        again = pool.score(["s"] * 3, ["ok"] * 3, ["t"] * 3, [{}] * 3, stop_on_error=True)
    finally:
        pool.close()
    assert [(r.score, r.error) for r in again] == [(1.0, None)] * 3


def test_manager_names_the_hanging_sample_and_the_unscored_rest(scorer_file, random_model_dir):
    from hybridrl.models.loading import load_tokenizer
    from hybridrl.rewards.manager import RewardManager, RewardSettings

    from test_custom_reward import _rollout  # tests/unit/rewards: a rollout of given texts

    tok = load_tokenizer(random_model_dir)
    manager = RewardManager(tok, ScoringPool(FunctionRef(scorer_file, "sleeps"), 0, TIMEOUT), RewardSettings("raise"))
    start = time.monotonic()
    with pytest.raises(HybridRLError, match=r"failed on 1 of 6 responses \(4 left unscored: the batch stopped at the "
                                            r"failure\); first: response 1 .*timed out after reward_model\.timeout_s"):
        manager.score(_rollout(tok, ["ok"] + ["hang"] * 5, ["t"] * 6))
    assert time.monotonic() - start < TIMEOUT + 1.5


def test_alarm_is_a_no_op_without_a_limit_and_off_the_main_thread():
    import threading

    with alarm(None):
        time.sleep(0.01)
    out = []
    thread = threading.Thread(target=lambda: out.append(alarm(0.01).__enter__() is None))
    thread.start()
    thread.join()
    assert out == [True] and signal.getitimer(signal.ITIMER_REAL)[0] == 0
