"""`hybridrl ARGS` run inside the test process: the same parser, checks, messages and exit codes as the installed
command (hybridrl.cli.main), without a new Python and its torch/transformers imports per call (3-5 s each on 2
cores). What only a separate process shows (the `python -m hybridrl` entry itself, exit on a signal, a library's
stray output at import) stays with subprocess.run in the tests that are about it."""

from __future__ import annotations

import contextlib
import io
import subprocess


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """A CompletedProcess of `hybridrl ARGS`: returncode, stdout and stderr as the command would give them."""
    from hybridrl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse: --help (0) and usage errors (2)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(["hybridrl", *args], code, out.getvalue(), err.getvalue())
