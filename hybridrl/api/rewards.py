"""Reward functions given from Python: TRL's signature, verl's, several of them with weights, sync or async.

Which signature a function has is read from its parameter names:
- a parameter `solution_str`: verl's `compute_score(data_source, solution_str, ground_truth, extra_info=None)`,
  called once per response (returns a float, or a dict with "score" and extras such as "acc" and "pred");
- a parameter `solution_strs`: verl's batched `compute_score(data_sources, solution_strs, ground_truths,
  extra_infos)`, one call per batch, a list back;
- a parameter `completions`, or **kwargs: TRL's `reward(prompts, completions, **columns) -> list[float]`, one
  call per batch. `prompts`/`completions` are text when every prompt of the data was plain text (TRL's
  standard format), else TRL's conversational form: the prompt's chat messages, and
  [{"role": "assistant", "content": text}] per completion. `columns`, lists over the batch, as TRL passes a
  dataset's columns: every column of the rows but the prompt under its own name (a verl-schema parquet's
  `data_source`, `reward_model`, `ability`, `extra_info`, and any other), `ground_truth` (the rows'
  reward_model.ground_truth), and each key of the rows' extra_info (where hybridrl.train keeps the other columns
  of data given from Python: hybridrl/api/data.py) where no column has its name; only those the function names,
  unless it takes **kwargs. A function naming a column the rows do not have is refused with the names they have.
  TRL's `completion_ids` and `trainer_state` are not passed.

An `async def` function of any kind is awaited; the async functions of one batch run concurrently.
Several functions: the score is the sum of weight x value (reward_weights, 1 each by default), and each
function's value is logged as reward/<name>/mean. A None in a TRL function's list means "no score from this
function" (as in TRL, it adds nothing to the sum); a response that no function scored is a failed sample
(reward_model.on_error: the run stops naming it, or with `zero` it scores 0 and is counted in reward/errors).
A function that raises fails the samples it was scoring, with its name.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from hybridrl.errors import ConfigError
from hybridrl.rewards.custom import NoScore, split_result
from hybridrl.rewards.pool import FunctionRef
from hybridrl.user_code import failure, where

TRL, VERL, VERL_BATCHED = "trl", "verl", "verl_batched"


def name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def kind_of(fn: Callable[..., Any]) -> str:
    """TRL, VERL or VERL_BATCHED, by parameter names (the module docstring's rule)."""
    if not callable(fn):
        raise ConfigError(f"reward: {fn!r} is not a function; give a function or a list of functions")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # some builtins have no signature
        raise ConfigError(f"reward function {name_of(fn)!r}: cannot read its parameters; wrap it in a def") from None
    if "solution_str" in params:
        return VERL
    if "solution_strs" in params:
        return VERL_BATCHED
    if "completions" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return TRL
    raise ConfigError(f"reward function {name_of(fn)}({', '.join(params)}) has neither TRL's signature "
                      "(prompts, completions, **kwargs) nor verl's compute_score(data_source, solution_str, "
                      "ground_truth, extra_info=None); rename its parameters to one of them")


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def function_ref(reward: Any, weights: Optional[Sequence[float]] = None, text_prompts: bool = False
                 ) -> Optional[FunctionRef]:
    """The FunctionRef that scores with `reward` (a function or a list of them); None for none. One sync verl
    function without a weight is scored per response (per-response timeouts, in parallel with
    reward_model.num_workers); anything else is one batched call (reward_model.timeout_s for the call)."""
    if reward is None:
        if weights is not None:
            raise ConfigError("reward_weights is given without reward=; pass the reward functions it weights")
        return None
    functions = list(reward) if isinstance(reward, (list, tuple)) else [reward]
    if not functions:
        raise ConfigError("reward=[] holds no function; give at least one, or leave reward out")
    kinds = [kind_of(fn) for fn in functions]
    weights = _weights(weights, len(functions))
    if len(functions) == 1 and kinds[0] == VERL and weights == (1.0,) and not _is_async(functions[0]):
        return FunctionRef(name=name_of(functions[0]), function=functions[0])
    combined = RewardFunctions(tuple(functions), tuple(kinds), weights, _unique_names(functions), text_prompts)
    return FunctionRef(name=" + ".join(combined.names), function=combined, batched=True, with_prompts=True)


def _weights(weights: Optional[Sequence[float]], count: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * count
    weights = tuple(weights)
    if len(weights) != count:
        raise ConfigError(f"reward_weights has {len(weights)} values for {count} reward functions; give one each")
    if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights):
        raise ConfigError(f"reward_weights={list(weights)}: give finite numbers")
    return tuple(float(w) for w in weights)


def _unique_names(functions: list) -> tuple[str, ...]:
    names: list[str] = []
    for fn in functions:
        name, k = name_of(fn), 2
        while name in names:
            name, k = f"{name_of(fn)}_{k}", k + 1
        names.append(name)
    return tuple(names)


def run_awaitables(awaitables: list) -> list:
    """Await them concurrently; from a thread whose event loop already runs (a notebook), in a thread of its own."""
    async def gather():
        return await asyncio.gather(*awaitables, return_exceptions=True)

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here: the usual case
        return asyncio.run(gather())
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(asyncio.run, gather()).result()
    finally:
        pool.shutdown(wait=False)  # a timeout (SIGALRM) must not wait for the thread


@dataclass(frozen=True)
class RewardFunctions:
    """Reward functions of any signature as one batched function of verl's batched signature plus `prompts`
    (FunctionRef.with_prompts): the weighted sum, and each function's value as an extra when there are several."""

    functions: tuple[Callable[..., Any], ...]
    kinds: tuple[str, ...]
    weights: tuple[float, ...]
    names: tuple[str, ...]
    text_prompts: bool  # TRL functions get text prompts and completions, else the conversational form

    def __call__(self, data_sources: list[str], solution_strs: list[str], ground_truths: list[str],
                 extra_infos: list[dict], prompts: Optional[list] = None, columns: Optional[list[dict]] = None) -> list:
        n = len(solution_strs)
        table = _columns(data_sources, ground_truths, extra_infos, columns)
        calls = [self._start(i, data_sources, solution_strs, ground_truths, extra_infos, prompts or [None] * n, table)
                 for i in range(len(self.functions))]
        pending = [(i, j) for i, call in enumerate(calls) for j, v in enumerate(call) if inspect.isawaitable(v)]
        for (i, j), value in zip(pending, run_awaitables([calls[i][j] for i, j in pending])):
            calls[i][j] = value
        values = [self._values(i, calls[i], n, table) for i in range(len(self.functions))]
        return [self._combine([v[j] for v in values]) for j in range(n)]

    def _start(self, i: int, sources, texts, truths, infos, prompts, table: dict[str, list]) -> list:
        """Function i's call(s): one value (or awaitable, or exception) per response for verl, else one item
        holding the batch's list."""
        fn, kind = self.functions[i], self.kinds[i]
        try:
            if kind == VERL:
                return [_guarded(fn, s, t, g, extra_info=e) for s, t, g, e in zip(sources, texts, truths, infos)]
            if kind == VERL_BATCHED:
                return [fn(data_sources=sources, solution_strs=texts, ground_truths=truths, extra_infos=infos)]
            return [_call_trl(fn, *self._trl_inputs(prompts, texts), table)]
        except Exception as e:  # noqa: BLE001  the user's code; reported per sample, with the function's name
            return [e]

    def _trl_inputs(self, prompts: list, texts: list[str]) -> tuple[list, list]:
        if self.text_prompts:
            return [m[-1]["content"] if m else None for m in prompts], list(texts)
        return list(prompts), [[{"role": "assistant", "content": t}] for t in texts]

    def _values(self, i: int, call: list, n: int, columns: dict[str, list]) -> list:
        """Function i's n values (number, dict, None or NoScore)."""
        name = self.names[i]
        if self.kinds[i] != VERL:  # one call: its list, or its exception for every sample
            out = call[0]
            if isinstance(out, BaseException):
                names = ("; the columns it gets: prompts, completions, " + ", ".join(sorted(columns))
                         if isinstance(out, KeyError) and self.kinds[i] == TRL else "")  # a column read by a wrong name
                return [NoScore(f"reward function {name!r} raised {failure(out)}{where(out)}{names}")] * n
            try:
                out = list(out)
            except TypeError:
                return [NoScore(f"reward function {name!r} returned {type(out).__name__}; return a list")] * n
            if len(out) != n:
                return [NoScore(f"reward function {name!r} returned {len(out)} values for {n} completions")] * n
            return out
        return [NoScore(f"reward function {name!r} raised {failure(v)}{where(v)}") if isinstance(v, BaseException)
                else v for v in call]

    def _combine(self, values: list) -> Any:
        """One response: the weighted sum of the functions' scores that are not None."""
        if len(values) == 1 and self.weights == (1.0,):  # one function: its value as it is (a dict keeps acc, pred)
            value = values[0]
            return NoScore("the reward function returned None (no score) for it") if value is None else _number(value)
        total, scored, extras = 0.0, False, {}
        for name, weight, value in zip(self.names, self.weights, values):
            if isinstance(value, NoScore):
                return value
            if value is None:
                continue
            try:
                score, more = split_result(_number(value))
            except ValueError as e:
                return NoScore(f"reward function {name!r} {e}")
            total, scored = total + weight * score, True
            extras.update(more)
            if len(values) > 1:
                extras[name] = score
        if not scored:
            return NoScore("every reward function returned None (no score) for it")
        return {"score": total, **extras}


def _guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(...), or the exception it raised (one response's failure must not fail the batch)."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  the user's code
        return e


def _number(value: Any) -> Any:
    """A numpy or torch scalar as a float; anything else unchanged (split_result judges it)."""
    if isinstance(value, (dict, bool, int, float)) or not hasattr(value, "__float__"):
        return value
    return float(value)


def _columns(sources: list[str], truths: list[str], infos: list[dict],
             rows: Optional[list[dict]] = None) -> dict[str, list]:
    """TRL's **columns (module doc): data_source, ground_truth and extra_info; each extra_info key (data given from
    Python keeps its other columns there); then the rows' own columns under their names, which win (TRL passes a
    dataset's columns unchanged). `rows`: each row's columns but its prompt (None: a batch not read from a dataset)."""
    out: dict[str, list] = {"data_source": list(sources), "ground_truth": list(truths), "extra_info": list(infos)}
    for key in sorted({k for info in infos for k in info} - {"prompts", "completions"}):
        out[key] = [info.get(key) for info in infos]
    if rows:
        for key in sorted({k for row in rows for k in row} - {"prompts", "completions", "extra_info"}):
            out[key] = [row.get(key) for row in rows]
    return out


def _call_trl(fn: Callable[..., Any], prompts: list, completions: list, columns: dict[str, list]) -> Any:
    """fn(prompts=, completions=, **columns), the columns limited to those it names unless it takes **kwargs; a
    column it needs that the rows do not have is a ConfigError naming the ones they have."""
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if n not in columns and n not in ("prompts", "completions")
               and p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        raise ConfigError(f"reward function {name_of(fn)!r} takes {', '.join(map(repr, missing))}, which the rows do "
                          f"not have; the columns it can name: prompts, completions, {', '.join(sorted(columns))}")
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        columns = {k: v for k, v in columns.items() if k in params}
    more = {k: v for k, v in (("prompts", prompts), ("completions", completions))
            if k in params or any(p.kind is p.VAR_KEYWORD for p in params.values())}
    return fn(**more, **columns)
