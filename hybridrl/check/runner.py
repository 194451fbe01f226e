"""Run the checks in order and time each; a check that raises is a ✗ with what it raised (a HybridRLError's
message is the user's fix: the twin run refused the config, a file is unreadable), never a crash of the whole
report."""

from __future__ import annotations

import time
import traceback
from typing import Callable, Iterable, Optional

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import load_checks
from hybridrl.check.result import NA, Result, failed
from hybridrl.errors import HybridRLError

NEEDS_RUNNABLE = {"sampling", "update", "multi-turn", "resume", "export", "scale"}  # they build or run the config
NEEDS_DATA = {"sampling", "update", "resume", "export"}  # they build the run's dataset from data.train_files


def run_checks(ctx: CheckContext, only: Optional[Iterable[str]] = None,
               on_result: Callable[[Result], None] = lambda r: None) -> list[Result]:
    """Every check (or the `only` ones, in their registry order) on `ctx`; `on_result` sees each as it ends."""
    wanted = None if only is None else set(only)
    results = []
    for entry in load_checks():
        if wanted is not None and entry.name not in wanted:
            continue
        wall, cpu = time.perf_counter(), time.process_time()
        result = _run_one(entry, ctx)
        result.name, result.seconds, result.cpu_seconds = entry.name, time.perf_counter() - wall, time.process_time() - cpu
        results.append(result)
        on_result(result)
    return results


def _run_one(entry, ctx: CheckContext) -> Result:
    if entry.name in NEEDS_RUNNABLE and not ctx.runnable:
        return Result(NA, "not run: the config does not train as it is (see config)")
    if entry.name in NEEDS_DATA and ctx.data_problem is not None:
        return Result(NA, f"not run: the training rows cannot be read (see data): {ctx.data_problem}")
    try:
        return entry.fn(ctx)
    except HybridRLError as e:
        return failed(f"the {entry.name} check could not run this config: {str(e).splitlines()[0][:300]}",
                      *str(e).splitlines()[1:], fix="fix what the message names, then run check again")
    except Exception as e:  # a bug of the check or of hybridrl itself: the report says so, with where
        where = traceback.extract_tb(e.__traceback__)[-1]
        return failed(f"the {entry.name} check itself failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                      f"at {where.filename}:{where.lineno}", fix="this is a hybridrl bug: please report it with the "
                      "command line")
