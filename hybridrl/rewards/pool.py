"""Run reward functions in worker processes with a per-sample timeout (pebble kills a worker
whose task runs past it and starts a fresh one), so a scorer that hangs or crashes cannot stall
or kill training.

Workers get the function by reference (built-in scorers by data_source, a user function by
file and name, loaded once per worker), never by pickling it: a function loaded from a file
is not importable by name in another process. Every outcome comes back as a `Scored`, with
the failure as text; the reward manager decides whether a failure stops the run.
"""

from __future__ import annotations

import math
import multiprocessing
import traceback
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Optional

from hybridrl.rewards.custom import KEYS, load_function, split_result
from hybridrl.rewards.scorers import SCORERS
from hybridrl.user_code import failure


@dataclass(frozen=True)
class Scored:
    score: float  # the reward function's score; 0.0 when it failed
    extras: dict[str, Any]  # its other dict keys (acc, pred, ...), as returned
    error: Optional[str] = None  # why it failed: raised, timed out, crashed, non-finite, bad return type


@dataclass(frozen=True)
class FunctionRef:
    """Which function scores: a user function (path, name), else the built-in scorer of each data_source."""

    path: Optional[str] = None
    name: str = "compute_score"
    batched: bool = False
    keys: tuple[str, str] = KEYS  # the settings that gave path and name, for errors (eval: its flags)

    def resolve(self) -> Optional[Callable[..., Any]]:
        return load_function(self.path, self.name, self.keys) if self.path else None


_custom: Optional[Callable[..., Any]] = None  # the user function inside a worker; never set in the trainer


def _init_worker(ref: FunctionRef) -> None:
    global _custom
    _custom = ref.resolve()


def _describe(e: BaseException) -> str:
    """`Type: message (at file:line)` of the innermost frame, short enough for one log line."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{failure(e)}{where}"


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
                fn: Optional[Callable[..., Any]] = None) -> list[Scored]:
    """A batched user function (verl's BatchRewardManager signature): one call for all samples."""
    try:
        values = list((fn or _custom)(data_sources=sources, solution_strs=texts, ground_truths=truths, extra_infos=infos))
    except (Exception, SystemExit) as e:  # a sys.exit in the user's function must not end the trainer
        return [Scored(0.0, {}, _describe(e))] * len(texts)
    if len(values) != len(texts):
        return [Scored(0.0, {}, f"the batched function returned {len(values)} results for {len(texts)} "
                                "responses; return one per response")] * len(texts)
    return [_checked(v) for v in values]


class ScoringPool:
    """Scores samples in `num_workers` processes with `timeout_s` per sample (a batched function
    gets timeout_s per sample in its batch); `num_workers=0` scores in this process, without a
    timeout."""

    def __init__(self, ref: FunctionRef, num_workers: int, timeout_s: float):
        self.ref, self.timeout_s = ref, timeout_s
        self._fn = ref.resolve()  # for in-process scoring; an import error surfaces here, in the trainer
        self._pool = None
        if num_workers > 0:
            from pebble import ProcessPool

            # fork: workers start in milliseconds and inherit the imported scorers; they run
            # plain Python (no torch), so forking a process that uses torch threads is safe
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
            self._pool = ProcessPool(max_workers=num_workers, initializer=_init_worker, initargs=(ref,), context=ctx)

    def score(self, sources: list[str], texts: list[str], truths: list[str], infos: list[dict]) -> list[Scored]:
        if self.ref.batched:
            if self._pool is None:
                return score_batch(sources, texts, truths, infos, self._fn)
            future = self._pool.schedule(score_batch, args=(sources, texts, truths, infos),
                                         timeout=self.timeout_s * len(texts))
            return self._result(future, len(texts))
        if self._pool is None:
            return [score_one(*args, fn=self._fn) for args in zip(sources, texts, truths, infos)]
        futures = [self._pool.schedule(score_one, args=args, timeout=self.timeout_s)
                   for args in zip(sources, texts, truths, infos)]
        return [self._result(f, 1)[0] for f in futures]

    def _result(self, future, count: int) -> list[Scored]:
        try:
            out = future.result()
            return out if isinstance(out, list) else [out]
        except FutureTimeout:
            why = f"timed out after reward_model.timeout_s={self.timeout_s:g}s" + (" per sample" if count > 1 else "")
        except Exception as e:  # the worker died (os._exit, a segfault in a C extension, out of memory)
            why = f"the scoring process failed: {_describe(e)}"
        return [Scored(0.0, {}, why)] * count

    def close(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
            self._pool = None
