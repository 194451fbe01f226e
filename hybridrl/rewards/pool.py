"""Run reward functions in worker processes with a per-sample timeout (pebble kills a worker
whose task runs past it and starts a fresh one), or in this process with the same timeout (SIGALRM),
so a scorer that hangs or crashes cannot stall or kill training; a batch ends within about timeout_s
of its first hang, whatever its size (see ScoringPool).

Workers get the function by reference (built-in scorers by data_source, a user function by
file and name, loaded once per worker), never by pickling it: a function loaded from a file
is not importable by name in another process. Every outcome comes back as a `Scored`, with
the failure as text; the reward manager decides whether a failure stops the run.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from hybridrl.errors import ConfigError
from hybridrl.rewards.custom import KEYS, load_function, split_result
from hybridrl.rewards.scorers import SCORERS
from hybridrl.user_code import failure, where


@dataclass(frozen=True)
class Scored:
    score: float  # the reward function's score; 0.0 when it failed
    extras: dict[str, Any]  # its other dict keys (acc, pred, ...), as returned
    error: Optional[str] = None  # why it failed: raised, timed out, crashed, non-finite, bad return type


@dataclass(frozen=True)
class FunctionRef:
    """Which function scores: a user function (path, name), or one given as an object from Python
    (`function`, hybridrl.train's reward=), else the built-in scorer of each data_source."""

    path: Optional[str] = None
    name: str = "compute_score"
    batched: bool = False
    keys: tuple[str, str] = KEYS  # the settings that gave path and name, for errors (eval: its flags)
    function: Optional[Callable[..., Any]] = None  # used instead of path/name; shipped to workers by cloudpickle
    with_prompts: bool = False  # batched: the call also gets prompts= (each row's chat messages) and columns= (each
    # row's dataset columns but its prompt: the Python API's TRL-style functions get them by name)

    @property
    def custom(self) -> bool:
        """A user function scores every row (not the data_source's built-in scorer)."""
        return self.function is not None or self.path is not None

    def resolve(self) -> Optional[Callable[..., Any]]:
        if self.function is not None:
            return self.function
        return load_function(self.path, self.name, self.keys) if self.path else None

    def check_picklable(self, why: str) -> None:
        """A ConfigError naming the function when it cannot be sent to another process (`why` says which)."""
        if self.function is None:
            return
        import cloudpickle

        try:
            cloudpickle.dumps(self.function)
        except Exception as e:  # noqa: BLE001  pickling raises TypeError, PicklingError, AttributeError ...
            name = getattr(self.function, "__qualname__", type(self.function).__name__)
            raise ConfigError(f"the reward function {name!r} cannot be pickled ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}), but {why} must receive it; create what "
                              "it holds that cannot be pickled (a lock, a client, an open file) inside the function, "
                              "or score in this process (reward_model.num_workers=0)") from None

    # An in-memory function travels by value (cloudpickle: a notebook's or a closure's too), never by name:
    # a process started with spawn could not import it.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.function is not None:
            import cloudpickle

            state["function"] = cloudpickle.dumps(self.function)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("function"), bytes):
            import pickle

            state = dict(state, function=pickle.loads(state["function"]))
        for key, value in state.items():
            object.__setattr__(self, key, value)


_custom: Optional[Callable[..., Any]] = None  # the user function inside a worker; never set in the trainer


def _init_worker(ref: FunctionRef) -> None:
    global _custom
    _custom = ref.resolve()


def _describe(e: BaseException) -> str:
    """`Type: message (at file:line)` of the innermost frame in the user's code, short enough for one log line."""
    return f"{failure(e)}{where(e)}"


def _checked(value: Any) -> Scored:
    try:
        score, extras = split_result(value)
    except ValueError as e:
        return Scored(0.0, {}, str(e))
    if not math.isfinite(score):
        return Scored(0.0, extras, f"returned a non-finite score ({score})")
    return Scored(score, extras)


def score_one(source: str, text: str, truth: str, info: dict, fn: Optional[Callable[..., Any]] = None) -> Scored:
    """One sample with `fn` (in a worker: its loaded user function), else the data_source's
    scorer; exceptions become a `Scored` with the error."""
    try:
        fn = fn or _custom or SCORERS.get(source)
        return _checked(fn(source, text, truth, extra_info=info))
    except (Exception, SystemExit) as e:  # the user's or a scorer's error (a sys.exit too), reported per sample
        return Scored(0.0, {}, _describe(e))


def score_batch(sources: list[str], texts: list[str], truths: list[str], infos: list[dict],
                fn: Optional[Callable[..., Any]] = None, more: Optional[dict] = None) -> list[Scored]:
    """A batched user function (verl's BatchRewardManager signature): one call for all samples; `more`
    (prompts= and columns=, FunctionRef.with_prompts) is passed as keywords when given."""
    more = more or {}
    try:
        values = list((fn or _custom)(data_sources=sources, solution_strs=texts, ground_truths=truths, extra_infos=infos,
                                      **more))
    except (Exception, SystemExit) as e:  # a sys.exit in the user's function must not end the trainer
        return [Scored(0.0, {}, _describe(e))] * len(texts)
    if len(values) != len(texts):
        return [Scored(0.0, {}, f"the batched function returned {len(values)} results for {len(texts)} "
                                "responses; return one per response")] * len(texts)
    return [_checked(v) for v in values]


NOT_SCORED = "not scored"  # the error of a sample left unscored because its batch stopped early
STOPPED = f"{NOT_SCORED}: the batch stopped at its first failure"


class ScoringPool:
    """Scores samples in `num_workers` processes, or in this process with `num_workers=0`.

    Timeouts (`timeout_s`) hold whatever the batch size:
    - a sample's scorer may run `timeout_s` (a batched function: its one call for the whole batch); a
      worker past it is killed and replaced; in this process the scorer is interrupted by SIGALRM
      (main thread; Python code, sleeps and regexes stop, a C extension that never checks for signals
      does not);
    - with `stop_on_error` (reward_model.on_error=raise) the first failure or timeout ends the batch at
      once: the others are cancelled (their workers killed if running) and marked NOT_SCORED;
    - otherwise, once one sample timed out, the rest of the batch gets `timeout_s` more (a hanging
      scorer usually hangs on every sample: without this cap the timeouts would add up sample after
      sample); what is unscored then is marked NOT_SCORED.
    """

    def __init__(self, ref: FunctionRef, num_workers: int, timeout_s: float):
        self.ref, self.timeout_s = ref, timeout_s  # <= 0: no timeout (the built-in scorers, in-process)
        self._limit = timeout_s if timeout_s > 0 else None
        self._fn = ref.resolve()  # for in-process scoring; an import error surfaces here, in the trainer
        self._pool = None
        if num_workers > 0:
            from pebble import ProcessPool

            # fork: workers start in milliseconds and inherit the imported scorers; they run
            # plain Python (no torch), so forking a process that uses torch threads is safe
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
            if ctx.get_start_method() != "fork":  # the workers get the function by pickle: refuse now, by name
                ref.check_picklable(f"reward_model.num_workers={num_workers} starts its scoring processes with "
                                    f"{ctx.get_start_method()}, and each")
            self._pool = ProcessPool(max_workers=num_workers, initializer=_init_worker, initargs=(ref,), context=ctx)

    def score(self, sources: list[str], texts: list[str], truths: list[str], infos: list[dict],
              stop_on_error: bool = False, prompts: Optional[list] = None,
              columns: Optional[list[dict]] = None) -> list[Scored]:
        """`prompts` (each row's chat messages) and `columns` (each row's dataset columns) reach a batched function
        that asks for them (FunctionRef.with_prompts)."""
        rows = list(zip(sources, texts, truths, infos))
        if self.ref.batched:
            more = {"prompts": prompts, "columns": columns} if self.ref.with_prompts else {}
            return self._score_batched(sources, texts, truths, infos, more)
        if self._pool is None:
            return self._score_here(rows, stop_on_error)
        return self._score_in_pool(rows, stop_on_error)

    def _score_batched(self, sources, texts, truths, infos, more: dict) -> list[Scored]:
        """One call for the batch, timeout_s for the call (not per sample: a hang must not wait N times)."""
        why = f"timed out after reward_model.timeout_s={self.timeout_s:g}s (the batched call)"
        if self._pool is None:
            try:
                with alarm(self._limit):
                    return score_batch(sources, texts, truths, infos, self._fn, more)
            except ScorerTimeout:
                return [Scored(0.0, {}, why)] * len(texts)
        future = self._pool.schedule(score_batch, args=(sources, texts, truths, infos, None, more), timeout=self._limit)
        return self._outcome(future, len(texts), why)

    def _score_here(self, rows: list[tuple], stop_on_error: bool) -> list[Scored]:
        results: list[Scored] = []
        deadline = None  # set by the first timeout: the rest of the batch gets timeout_s more
        for row in rows:
            budget = self._limit if deadline is None else min(self.timeout_s, deadline - time.monotonic())
            if stop_on_error and results and results[-1].error:
                results.append(Scored(0.0, {}, STOPPED))
                continue
            if budget is not None and budget <= 0:
                results.append(Scored(0.0, {}, self._capped()))
                continue
            try:
                with alarm(budget):
                    scored = score_one(*row, fn=self._fn)
            except ScorerTimeout:
                scored = Scored(0.0, {}, self._timed_out(budget))
                deadline = deadline or time.monotonic() + self.timeout_s
            results.append(scored)
        return results

    def _score_in_pool(self, rows: list[tuple], stop_on_error: bool) -> list[Scored]:
        futures = {self._pool.schedule(score_one, args=row, timeout=self._limit): i for i, row in enumerate(rows)}
        results: list[Optional[Scored]] = [None] * len(rows)
        pending, deadline, why = set(futures), None, STOPPED
        while pending:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = wait(pending, timeout=wait_s, return_when=FIRST_COMPLETED)
            if not done:  # the cap after a first timeout ran out
                why = self._capped()
                break
            for future in done:
                results[futures[future]] = self._outcome(future, 1, self._timed_out(self.timeout_s))[0]
            if stop_on_error and any(results[futures[f]].error for f in done):
                break
            if deadline is None and any(isinstance(f.exception(), FutureTimeout) for f in done if not f.cancelled()):
                deadline = time.monotonic() + self.timeout_s
        for future in pending:  # cancelling a running task kills its worker (pebble replaces it)
            future.cancel()
            results[futures[future]] = Scored(0.0, {}, why)
        return results  # type: ignore[return-value]

    def _capped(self) -> str:
        return f"{NOT_SCORED}: the batch's scoring ended {self.timeout_s:g}s after a first timeout"

    def _timed_out(self, seconds: float) -> str:
        return f"timed out after reward_model.timeout_s={self.timeout_s:g}s" + (
            "" if seconds >= self.timeout_s else f" (cut to {seconds:.1f}s: an earlier sample of the batch timed out)")

    @staticmethod
    def _outcome(future, count: int, timed_out: str) -> list[Scored]:
        try:
            out = future.result()
            return out if isinstance(out, list) else [out]
        except FutureTimeout:
            why = timed_out
        except Exception as e:  # the worker died (os._exit, a segfault in a C extension, out of memory)
            why = f"the scoring process failed: {_describe(e)}"
        return [Scored(0.0, {}, why)] * count

    def close(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
            self._pool = None


class ScorerTimeout(BaseException):
    """Raised in the main thread by SIGALRM when an in-process scorer runs past its time. A BaseException,
    so that a scorer's `except Exception` does not swallow it."""


@contextlib.contextmanager
def alarm(seconds: Optional[float]) -> Iterator[None]:
    """Raise ScorerTimeout in the block after `seconds` (again every 0.1 s until the block is left, in case
    the scorer catches it). Main thread only, where signals arrive; elsewhere the block runs untimed."""
    if seconds is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def ring(signum, frame):
        raise ScorerTimeout()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3), 0.1)
    try:
        yield
    finally:
        while True:  # an alarm that rings while disarming must not escape with the timer still set
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                break
            except ScorerTimeout:
                continue
