"""The user's agent: `async def agent(client, row) -> float | dict`, from a file (actor_rollout_ref.rollout.agent.path
and .name) or given from Python (hybridrl.train(agent=fn)), checked before anything is loaded so a wrong function
fails in one line, not at the first step."""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable

from hybridrl.errors import ConfigError, setting
from hybridrl.user_code import import_file

KEYS = ("actor_rollout_ref.rollout.agent.path", "actor_rollout_ref.rollout.agent.name")
SIGNATURE = "async def agent(client, row) -> float | dict"


def load_agent(path: str, name: str) -> Callable[..., Any]:
    """The agent function `name` of the Python file `path`, checked (check_agent)."""
    if not os.path.isfile(path):
        problem = "a folder, not a file" if os.path.isdir(path) else "file not found"
        raise ConfigError(f"{setting(KEYS[0], path)}: {problem}; give the Python file that defines `{SIGNATURE}`")
    module = import_file(path, f"hybridrl_agent_{abs(hash(path))}", setting(KEYS[0], path))
    fn = getattr(module, name, None)
    if fn is None:
        found = sorted(k for k, v in vars(module).items() if inspect.iscoroutinefunction(v) and not k.startswith("_"))
        raise ConfigError(f"{setting(KEYS[1], name)}: no such function in {path}; async functions there: "
                          f"{', '.join(found) or 'none'}")
    return check_agent(fn, f"{setting(KEYS[1], name)} in {path}")


def check_agent(fn: Any, what: str) -> Callable[..., Any]:
    """`fn` itself when it is an async function callable as fn(client, row); else a ConfigError naming `what`."""
    if not callable(fn):
        raise ConfigError(f"{what} is a {type(fn).__name__}, not a function; write `{SIGNATURE}`")
    if not inspect.iscoroutinefunction(fn) and not inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        raise ConfigError(f"{what} is not an async function: the proxy runs every agent of a step concurrently on one "
                          f"event loop; write `{SIGNATURE}` (await the client's calls; run blocking tools with "
                          "asyncio.to_thread)")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise ConfigError(f"{what} must take two arguments (client, row); its signature is "
                          f"{fn.__name__}{inspect.signature(fn)}; write `{SIGNATURE}`") from None
    except ValueError:  # no signature to read (a builtin): it will be called and fail there if wrong
        pass
    return fn
