"""Where the libraries' own output goes during a run: into files in the run folder, not onto the console.

A run's console is hybridrl's lines and real errors. vLLM, Ray, torch and triton print warnings meant for their
own developers (a vLLM 0.32 engine prints ~50 lines at start, among them a whole traceback that is only a
warning: its chat-template warm-up needs the tokenizer we deliberately do not give it). They are kept, in
`<run folder>/logs/`:
- driver.log: what the libraries log through Python's `logging` in the driver process (Ray's start-up notes,
  a local vLLM engine's front end), and the output of a local vLLM engine's own processes;
- <pool>-rank<r>.log: everything a Ray worker process and its engine processes print.
Library records at ERROR and above still reach the console (stderr), without their traceback when it is only
attached to a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator

LOGS = "logs"
CONSOLE_FORMAT = "%(name)s: %(levelname)s: %(message)s"


def logs_dir(run_dir: str) -> str:
    return os.path.join(run_dir, LOGS)


def worker_log(run_dir: str, pool: str, rank: int) -> str:
    return os.path.join(logs_dir(run_dir), f"{pool}-rank{rank}.log")


def driver_log(run_dir: str) -> str:
    return os.path.join(logs_dir(run_dir), "driver.log")


class _LazyFile(logging.FileHandler):
    """A file handler that makes its folder and file at the first record: a run refused before it starts writes
    nothing into its folder."""

    def __init__(self, path: str):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        return super()._open()


class WithoutWarningTracebacks(logging.Filter):
    """Drops the traceback of a record below ERROR: a library that attaches one to a warning (vLLM's chat
    template warm-up) means "this optional step failed", and the console shows the one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


_installed: list[logging.Handler] = []


class FileOnly(logging.Filter):
    """Keeps the records of the loggers under `names` off a handler (the console): a caller that says the same
    thing in its own line (a sweep reports each failed trial; Ray Tune's ERROR record of it is a traceback)."""

    def __init__(self, names: tuple[str, ...]):
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(record.name == n or record.name.startswith(n + ".") for n in self.names)


def route_library_logging(run_dir: str, file_only: tuple[str, ...] = ()) -> str:
    """Library log records of this process go to driver.log (WARNING and up, made only when one comes) and, at
    ERROR and up, to stderr, except those of the loggers under `file_only` (FileOnly). Replaces the handlers an
    earlier call installed (a process may run several commands). Returns the log's path."""
    root = logging.getLogger()
    for handler in _installed:
        root.removeHandler(handler)
        handler.close()
    path = driver_log(run_dir)
    to_file = _LazyFile(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.ERROR)
    console.setFormatter(logging.Formatter(CONSOLE_FORMAT))
    if file_only:
        console.addFilter(FileOnly(file_only))
    _installed[:] = [to_file, console]
    for handler in _installed:
        root.addHandler(handler)
    return path


_redirected_for_good: str | None = None  # the file send_process_output_to sent this process's output to


@contextlib.contextmanager
def process_output_to(path: str) -> Iterator[None]:
    """Inside the block this process's stdout and stderr (file descriptors 1 and 2, so C++ and child processes
    too) append to `path`; the processes started inside keep writing there after it. Used around building a
    local vLLM engine, whose processes are spawned then. In a process whose output already goes to its own
    file (a Ray worker) it changes nothing."""
    if _redirected_for_good is not None:
        yield
        return
    saved = [os.dup(1), os.dup(2)]
    try:
        _point_output_at(path)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved):
            os.dup2(original, fd)
            os.close(original)


def send_process_output_to(path: str) -> None:
    """From now on this process's stdout and stderr (and its future child processes') append to `path`: a Ray
    worker, whose output the driver does not show (ray.init(log_to_driver=False))."""
    global _redirected_for_good
    _point_output_at(path)
    _redirected_for_good = path


def _point_output_at(path: str) -> None:
    """File descriptors 1 and 2 append to `path` (what Python buffered so far is written where it was going)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)


def output_file(default: str | None = None) -> str | None:
    """Where this process's output goes for good (a Ray worker's log), else `default`."""
    return _redirected_for_good or default


def adopt_logger(name: str) -> None:
    """A library logger that prints through a handler of its own (Ray's, on stderr) hands its records to the
    root logger's handlers instead: route_library_logging's file, and the console for errors."""
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = True


def strip_warning_tracebacks(logger_name: str) -> None:
    """Every handler of `logger_name` (a library that configures its own, as vLLM does) prints a warning's
    line without the traceback attached to it."""
    for handler in logging.getLogger(logger_name).handlers:
        if not any(isinstance(f, WithoutWarningTracebacks) for f in handler.filters):
            handler.addFilter(WithoutWarningTracebacks())
