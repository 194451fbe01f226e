"""The phase timeline of a run (`trainer.profile_timeline=PATH`): where each process spends each step,
as a Chrome-trace JSON that opens in Perfetto (ui.perfetto.dev) or chrome://tracing.

Each process has one recorder (`RECORDER`), off until `enable(name)`; while off, `span` returns a
shared no-op context, so recording costs nothing in a run that does not ask for it. Spans are
complete events (`"ph": "X"`, `ts`/`dur` in microseconds of the wall clock, `time.time_ns()`, so
the tracks of processes on one machine line up; `pid` is the OS process id, `tid` too: one track
per process). `drain()` hands over the events recorded since the last drain, headed by the `"M"`
metadata events naming the process the first time. `TimelineWriter` merges the drains of every
process and rewrites the file atomically, so a run that crashes still leaves a readable file.

Recording in a worker class (a new pool's worker too):
    class MyWorker(TimelineWorker):      # adds the remote methods timeline_enable and timeline_events
        @recorded                        # or `with span("generate", rows=n):` inside the method
        def generate(self, ...): ...
and on the driver, once per worker: `timeline_enable.remote("<pool> rank <r>")` before its first
call, and `timeline_events.remote()` once per step, merged with `TimelineWriter.add` (the Ray pools
do both: distributed/group.py). This module imports only the standard library, so workers can import
it without the trainer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from typing import Callable, Iterable, Iterator, Optional

_OFF = contextlib.nullcontext()  # what span() returns while recording is off: no allocation, no clock read


def now_us() -> int:
    """Wall-clock microseconds: comparable between processes (perf_counter is not)."""
    return time.time_ns() // 1000


class Recorder:
    """One process's spans (see the module doc)."""

    def __init__(self):
        self.name: Optional[str] = None  # the process's track name; None: recording is off
        self.args: dict = {}  # added to every span's args (the driver's current step)
        self._events: list[dict] = []
        self._lock = threading.Lock()  # a threaded Ray actor may end two calls at once

    @property
    def enabled(self) -> bool:
        return self.name is not None

    def enable(self, name: str, sort_index: int = 0) -> None:
        """Record from now on, on the track `name` (e.g. "driver", "actor rank 0"); tracks are shown by
        `sort_index`, then by name."""
        pid = os.getpid()
        self.name = name
        with self._lock:  # the metadata first: it names the track in whichever file gets the events
            self._events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": name}})
            self._events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": pid,
                                 "args": {"sort_index": sort_index}})

    def disable(self) -> None:
        """Stop recording and drop what was not drained."""
        self.name, self.args = None, {}
        with self._lock:
            self._events = []

    def span(self, name: str, **args):
        """A context manager recording its body as one complete event `name` with `args`."""
        return self._span(name, args) if self.enabled else _OFF

    @contextlib.contextmanager
    def _span(self, name: str, args: dict) -> Iterator[None]:
        start = now_us()
        try:
            yield
        finally:  # a phase that raised still shows how long it ran
            pid = os.getpid()
            event = {"name": name, "ph": "X", "ts": start, "dur": now_us() - start, "pid": pid, "tid": pid,
                     "args": {**self.args, **args}}
            with self._lock:
                self._events.append(event)

    def drain(self) -> list[dict]:
        """The events recorded since the last drain (metadata included), oldest first."""
        with self._lock:
            events, self._events = self._events, []
        return events


RECORDER = Recorder()  # this process's recorder
enable, disable, span, drain = RECORDER.enable, RECORDER.disable, RECORDER.span, RECORDER.drain


def set_args(**args) -> None:
    """Args every later span of this process carries (e.g. step=3), until changed or disabled."""
    RECORDER.args.update(args)


def recorded(method: Callable) -> Callable:
    """A method whose every call is a span named after it (worker methods called by the driver)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with RECORDER.span(method.__name__):
            return method(*args, **kwargs)

    return wrapper


class TimelineWorker:
    """The two remote methods through which the driver switches a worker's recorder on and takes its spans."""

    def timeline_enable(self, name: str, sort_index: int = 0) -> None:
        enable(name, sort_index)

    def timeline_events(self) -> list[dict]:
        return drain()


class TimelineWriter:
    """Merges the events of every process into one Chrome-trace file at `path`.

    `flush()` takes the new events of each source (callables returning lists of events: this process's
    `drain`, the worker pools' collectors) and rewrites the file when `every_s` has passed since the
    last write (the whole file each time: it stays valid JSON at every moment, at a cost that grows
    with the run, hence the interval). `flush(force=True)` writes regardless."""

    def __init__(self, path: str, sources: Iterable[Callable[[], list[dict]]] = (drain,), every_s: float = 10.0):
        self.path, self.sources, self.every_s = path, list(sources), every_s
        self.events: list[dict] = []
        self._written_at = float("-inf")  # the first flush writes: a file exists from the first step on

    def add(self, events: list[dict]) -> None:
        self.events.extend(events)

    def collect(self) -> None:
        for source in self.sources:
            self.add(source())

    def flush(self, force: bool = False) -> None:
        self.collect()
        if force or time.monotonic() - self._written_at >= self.every_s:
            self.write()

    def write(self) -> None:
        """The file replaced in one rename: a reader (or a crash) never sees half of it."""
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        tmp = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump({"traceEvents": self.events, "displayTimeUnit": "ms"}, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        self._written_at = time.monotonic()
