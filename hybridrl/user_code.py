"""Running a user's Python file (a custom reward function, a tool class): whatever it does while being
imported, an exception or a `sys.exit`, becomes one ConfigError line naming the setting and the file,
never a traceback or a silent exit of hybridrl.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
import traceback
from types import ModuleType

from hybridrl.errors import ConfigError


def failure(e: BaseException) -> str:
    """`Type: message` of what user code raised; a sys.exit (or exit()) is named as such."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    return f"{type(e).__name__}: {e}"


# Code that is not the user's: the standard library, installed packages, hybridrl itself. A library can
# sit innermost in a traceback (wandb wraps sys.exit, numpy raises inside itself), so "where" is the
# innermost frame outside these, the line the user can go and fix.
_NOT_USERS = tuple({os.path.realpath(p) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")
                    if (p := sysconfig.get_paths().get(k))} | {os.path.dirname(os.path.realpath(__file__)) + os.sep})


def where(e: BaseException) -> str:
    """` (at file:line)` of the innermost frame of `e`'s traceback in the user's code (else the innermost
    frame of all; "" without a traceback)."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    users = [f for f in frames if not os.path.realpath(f.filename).startswith(_NOT_USERS)]
    frame = (users or frames)[-1]
    return f" (at {frame.filename}:{frame.lineno})"


def import_file(path: str, module_name: str, what: str) -> ModuleType:
    """Execute the Python file `path` as a new module named `module_name`. `what` names the setting in
    errors (e.g. "custom_reward_function.path='reward.py'"). KeyboardInterrupt still stops hybridrl."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # e.g. a file not ending in .py
        raise ConfigError(f"{what}: cannot import it as Python; give a .py file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the user's file: any error, SystemExit included, reported with its type
        raise ConfigError(f"{what} failed to import: {failure(e)}") from None
    return module
