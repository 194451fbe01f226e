"""What long work is doing: the running phase and its counts, as a bar on a terminal and as plain
lines in a log.

The driver names the phases (`phase("gen")`; trainer/metrics.timed opens one for every timed
phase); the code doing the work counts units into whichever phase runs: `advance_tokens` once per
decoding step (rollout/hf.py), `counted(..., "micro-batch")` over forward/backward micro-batches
(workers/update_loop.py, models/forward.py), prompts in validation (trainer/validate.py). All of
it is a no-op unless a Reporter is active (`reporting()`): library calls and the worker processes
of backend=ray stay silent, and there the driver shows each phase with its running time only.

On a terminal (the progress stream is a TTY) the innermost phase that has run `after_s` seconds
gets a tqdm line, redrawn every `tick_s` by a background thread, so a phase stuck in one long
forward still shows its name and time. In a log (not a TTY) no carriage return is ever written: a
phase that ran `after_s` or more gets one line when it ends, and a line every `every_s` while it runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")
AFTER_S = 2.0  # a phase shorter than this shows nothing
TICK_S = 0.5  # how often a terminal's bar is redrawn


@dataclass
class Phase:
    name: str
    unit: Optional[str] = None  # the unit of the bar; None: the first unit counted
    total: Optional[int] = None  # units expected, if known
    counts: dict[str, int] = field(default_factory=dict)  # unit -> units done
    start: float = field(default_factory=time.time)
    nested: bool = False  # another phase ran inside it (its end line is left to the inner ones)
    last_line: float = 0.0  # log mode: when its last line was written

    def elapsed(self) -> float:
        return time.time() - self.start

    def summary(self) -> str:
        """'1536 tokens, 3 micro-batches' (the bar's unit first, out of the total when known)."""
        units = sorted(self.counts, key=lambda u: u != self.unit)
        parts = [f"{self.counts[u]}" + (f"/{self.total}" if u == self.unit and self.total else "")
                 + f" {unit_of(self.counts[u], u)}" for u in units]
        return ", ".join(parts)


def plural(unit: str) -> str:
    return unit + ("es" if unit.endswith(("ch", "sh", "s")) else "s")


def unit_of(count: int, unit: str) -> str:
    return unit if count == 1 else plural(unit)


def rate(count: int, seconds: float, unit: str) -> str:
    """'87.8 tokens/s', or for slow units '8.2 s/micro-batch'."""
    per_s = count / max(seconds, 1e-9)
    return f"{per_s:.3g} {plural(unit)}/s" if per_s >= 1 else f"{1 / max(per_s, 1e-9):.3g} s/{unit}"


class Reporter:
    """Shows the stack of running phases on `stream` (default stderr); see the module doc."""

    def __init__(self, stream: Optional[TextIO] = None, tty: Optional[bool] = None, after_s: Optional[float] = None,
                 tick_s: Optional[float] = None, every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.after_s = AFTER_S if after_s is None else after_s
        self.tick_s, self.every_s = TICK_S if tick_s is None else tick_s, every_s
        self.prefix = ""  # e.g. "step 3", before each log line
        self.stack: list[Phase] = []
        self._lock = threading.RLock()  # the stack, the counts and the bar, shared with the ticker thread
        self._bar: Optional[tqdm] = None  # the innermost phase's line (terminal only)
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    # -- lifetime -------------------------------------------------------------------------------
    def start(self) -> None:
        self._ticker = threading.Thread(target=self._run_ticker, name="hybridrl-progress", daemon=True)
        self._ticker.start()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._close_bar()

    def _run_ticker(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self._lock:
                try:
                    self.tick()
                except (OSError, ValueError):  # the terminal went away: stop drawing, the work goes on
                    return

    # -- what the work calls --------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str, total: Optional[int] = None, unit: Optional[str] = None) -> Iterator[Phase]:
        p = Phase(name, unit, total)
        with self._lock:
            if self.stack:
                self.stack[-1].nested = True
            self.stack.append(p)
        done = False
        try:
            yield p
            done = True
        finally:
            with self._lock:
                self.stack.remove(p)
                self._ended(p, done)

    def advance(self, n: int, unit: str) -> None:
        """n more units done in the innermost phase (the first unit counted becomes its bar's unit)."""
        with self._lock:
            if self.stack:
                p = self.stack[-1]
                p.unit = p.unit or unit
                p.counts[unit] = p.counts.get(unit, 0) + n

    def write(self, line: str) -> None:
        """A message line on stdout, above the bars (flushed: a log file shows it at once)."""
        with self._lock:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()

    def steps(self, first: int, total: int, desc: str = "training") -> Iterator[int]:
        """Steps first..total; on a terminal with an overall bar, in a log without one (the step's
        metrics line is the log's record of it). Sets the prefix of log lines to 'step N'."""
        bar = None
        if self.tty:
            bar = tqdm(desc=desc, unit="step", dynamic_ncols=True, initial=first - 1, total=total, file=self.stream)
        try:
            for step in range(first, total + 1):
                self.prefix = f"step {step}"
                yield step
                if bar is not None:
                    bar.update()
        finally:
            self.prefix = ""
            if bar is not None:
                bar.close()

    # -- showing it -----------------------------------------------------------------------------
    def tick(self) -> None:
        """Redraw the innermost phase (terminal), or write its line if one is due (log); holds the lock."""
        p = self.stack[-1] if self.stack else None
        if p is None or (self._bar is None and p.elapsed() < self.after_s):
            return
        if self.tty:
            self._draw(p)
        elif p.elapsed() >= self.every_s and time.time() - max(p.last_line, p.start) >= self.every_s:
            p.last_line = time.time()
            self._line(f"{p.name}: running {p.elapsed():.0f} s" + (f", {p.summary()} so far" if p.counts else ""))

    def _ended(self, p: Phase, done: bool) -> None:
        if not self.stack:
            self._close_bar()  # the outermost phase ended: the next one starts a fresh line
        # a phase that raised gets no line: the error that follows says what happened
        if done and not self.tty and not p.nested and p.elapsed() >= self.after_s:
            self._line(f"{p.name}: " + (f"{p.summary()} in " if p.counts else "") + f"{p.elapsed():.1f} s")

    def _line(self, text: str) -> None:
        try:
            self.stream.write(f"{self.prefix} {text}\n" if self.prefix else f"{text}\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream or pipe: showing progress must never end the work
            pass

    def _draw(self, p: Phase) -> None:
        """The phase's line: `name: 45% |###   | 45/100 prompts [00:12<00:15, 300 tokens]` with a total,
        else `name: 768 tokens, 2 micro-batches [00:08, 87.8 tokens/s]`; tqdm gets the counts as they are."""
        counted = p.unit is not None and p.unit in p.counts
        if p.total:
            fmt = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} " + plural(p.unit or "item") + \
                  " [{elapsed}<{remaining}{postfix}]"
            desc, n = p.name, p.counts.get(p.unit, 0)
            postfix = ", ".join(f"{c} {unit_of(c, u)}" for u, c in p.counts.items() if u != p.unit)
        else:
            fmt, n = "{desc} [{elapsed}{postfix}]", 0
            desc = f"{p.name}: {p.summary()}" if p.counts else p.name
            postfix = rate(p.counts[p.unit], p.elapsed(), p.unit) if counted else ""
        if self._bar is None:
            self._bar = tqdm(total=p.total, file=self.stream, dynamic_ncols=True, leave=False, bar_format=fmt,
                             desc=desc, initial=n)
        bar = self._bar
        bar.total, bar.bar_format, bar.start_t, bar.n, bar.initial = p.total, fmt, p.start, n, 0
        bar.set_description_str(desc, refresh=False)
        bar.set_postfix_str(postfix, refresh=False)
        bar.refresh()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without isatty
        return False


_active: Optional[Reporter] = None


def active() -> Optional[Reporter]:
    return _active


@contextlib.contextmanager
def reporting(stream: Optional[TextIO] = None, tty: Optional[bool] = None, **kwargs) -> Iterator[Reporter]:
    """The active Reporter; one is made (and closed at the end) when none is active yet."""
    global _active
    if _active is not None:
        yield _active
        return
    reporter = Reporter(stream, tty, **kwargs)
    reporter.start()
    _active = reporter
    try:
        yield reporter
    finally:
        _active = None
        reporter.close()


def phase(name: str, total: Optional[int] = None, unit: Optional[str] = None):
    """A phase of the active Reporter (a no-op without one)."""
    return _active.phase(name, total, unit) if _active is not None else contextlib.nullcontext()


def advance(n: int, unit: str) -> None:
    if _active is not None:
        _active.advance(n, unit)


def advance_tokens(live) -> None:
    """One decoding step: live [N] bool, the rows that got a token (summed only when someone watches)."""
    if _active is not None:
        _active.advance(int(live.sum()), "token")


def counted(items: Iterable[T], unit: str) -> Iterator[T]:
    """The items, counting one `unit` as the work on each one ends (when the next is asked for)."""
    for item in items:
        yield item
        advance(1, unit)


def write(line: str) -> None:
    """A message line: above the bars of the active Reporter, else plainly on stdout (flushed)."""
    if _active is not None:
        _active.write(line)
    else:
        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()


_forking: Optional[Reporter] = None  # the Reporter whose lock a fork holds


def _before_fork() -> None:
    # A forked child (the reward scorers' pool) must not inherit the locks of a write the ticker thread
    # is in the middle of (its own, tqdm's, the stream's): the fork waits for the write to end.
    global _forking
    _forking = _active
    if _forking is not None:
        _forking._lock.acquire()


def _after_fork_in_parent() -> None:
    if _forking is not None:
        _forking._lock.release()


def _after_fork_in_child() -> None:
    global _active, _forking
    _active = _forking = None  # the child has no ticker thread and shows nothing


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
