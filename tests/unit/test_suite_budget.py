"""The suite's own time budget (tests/budget_plugin.py): a test without the slow marker over the limit fails the
run, naming it; a slow-marked one over it does not; both are counted in the budget line."""

pytest_plugins = "pytester"

TESTS = '''
import time
import pytest

def test_quick():
    pass

def test_too_long_for_the_fast_tier():
    time.sleep(0.4)

@pytest.mark.slow
def test_slow_and_marked():
    time.sleep(0.4)
'''


def _run(pytester, monkeypatch, *args):
    monkeypatch.setenv("HYBRIDRL_TEST_BUDGET_S", "0.2")
    pytester.makeini("[pytest]\nmarkers = slow: slow")
    pytester.makepyfile(test_timed=TESTS)
    return pytester.runpytest("-p", "budget_plugin", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args)


def test_an_unmarked_test_over_the_budget_fails_the_run_and_is_named(pytester, monkeypatch):
    result = _run(pytester, monkeypatch)
    result.assert_outcomes(passed=3)  # every test passed, and yet
    assert result.ret == 1
    result.stdout.fnmatch_lines(["suite budget: 3 tests in * test-seconds; slowest without the marker * s "
                                 "(limit 0.2 s for a test without the slow marker)",
                                 "OVER BUDGET: test_timed.py::test_too_long_for_the_fast_tier took * s without the slow marker*"])
    assert "test_slow_and_marked took" not in result.stdout.str()


def test_within_the_budget_the_run_passes(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "-m", "slow or not slow", "-k", "not too_long")
    assert result.ret == 0 and "OVER BUDGET" not in result.stdout.str()
