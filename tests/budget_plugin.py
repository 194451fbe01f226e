"""The suite's time budget, printed and enforced by the suite itself (registered by tests/conftest.py).

A test without the `slow` marker belongs to the fast tier (`make test`), which must stay within minutes on a
2-core machine: one that takes longer than BUDGET_S (setup + call + teardown, so a fixture it alone pays for
counts) fails the run, named with its time, whatever the tests' own outcomes. Either it is made faster, or it is
marked `slow` and runs in `make test-slow` (CI runs both). Under pytest-xdist the reports reach the controller,
which does the sums; the workers only run tests.

HYBRIDRL_TEST_BUDGET_S overrides the limit (the plugin's own test sets a fraction of a second).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

BUDGET_S = 20.0


class Budget:
    """Sums each test's phases as their reports arrive; judges and prints at the session's end."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.seconds: dict[str, float] = defaultdict(float)  # nodeid -> setup + call + teardown
        self.slow: set[str] = set()  # nodeids carrying the `slow` marker

    def over(self) -> list[tuple[str, float]]:
        """(nodeid, seconds) of every test without the slow marker over the limit, slowest first."""
        over = [(n, s) for n, s in self.seconds.items() if s > self.limit_s and n not in self.slow]
        return sorted(over, key=lambda x: -x[1])

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] += report.duration
        if "slow" in report.keywords:
            self.slow.add(report.nodeid)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.over() and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.seconds:
            return
        fast = [s for n, s in self.seconds.items() if n not in self.slow]
        slowest = f"; slowest without the marker {max(fast):.1f} s" if fast else ""
        terminalreporter.write_line(f"suite budget: {len(self.seconds)} tests in {sum(self.seconds.values()):.0f} "
                                    f"test-seconds{slowest} (limit {self.limit_s:g} s for a test without the slow "
                                    f"marker)")
        for nodeid, seconds in self.over():
            terminalreporter.write_line(f"OVER BUDGET: {nodeid} took {seconds:.1f} s without the slow marker: make "
                                        f"it faster, or mark it @pytest.mark.slow (it then runs in `make "
                                        f"test-slow`)", red=True)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # an xdist worker has workerinput: the controller (or a plain run) judges
        config.pluginmanager.register(Budget(float(os.environ.get("HYBRIDRL_TEST_BUDGET_S", BUDGET_S))),
                                      "hybridrl-budget")
