"""Tools a model can call during a multi-turn rollout, and the YAML file that configures them.

A tool is a class with an OpenAI function schema (`{"type": "function", "function": {"name",
"description", "parameters"}}`) and a `call(arguments) -> str`. The tool config file follows
verl's layout (`actor_rollout_ref.rollout.multi_turn.tool_config_path`):

    tools:
      - class_name: calculator            # a built-in name, `pkg.module.Class` or `path/to/file.py:Class`
        config: {timeout_s: 5}            # keyword arguments of the class (optional)
        tool_schema: {type: function, function: {name: calculator, ...}}   # optional for built-ins

Whatever goes wrong in a call (bad arguments, an exception, a timeout) becomes an error text the
model reads as the tool's response and a counted metric, never a crashed run.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional

from hybridrl.registry import Registry
from hybridrl.user_code import failure


class ToolError(Exception):
    """A failure the model should read about (bad arguments, a failed computation); `kind` is one
    of ERROR_KINDS and names the metric it is counted in."""

    def __init__(self, message: str, kind: str = "bad_arguments"):
        super().__init__(message)
        self.kind = kind


def function_schema(name: str, description: str, argument: str, argument_description: str) -> dict:
    """An OpenAI function schema with one required string argument (the built-in tools' shape)."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {
            argument: {"type": "string", "description": argument_description}}, "required": [argument]}}}


class Tool(ABC):
    """One callable tool. Subclasses set `default_schema` (used when the YAML gives none)."""

    default_schema: dict = {}

    def __init__(self, tool_schema: Optional[dict] = None, timeout_s: float = 10.0):
        self.schema = tool_schema or self.default_schema
        self.timeout_s = timeout_s  # wall-clock bound on one call (see run_calls)

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    @abstractmethod
    def call(self, arguments: dict) -> str:
        """The tool's answer to one call; raise ToolError for an answer the model should see as an error."""


TOOLS: Registry = Registry("tool", "actor_rollout_ref.rollout.multi_turn tool config: tools[].class_name")


@dataclass(frozen=True)
class CallResult:
    text: str  # what the model reads inside <tool_response>
    error: Optional[str]  # None on success; else one of ERROR_KINDS
    tool: Optional[str]  # the tool called, None when the call named no known tool


# every failure is one of these (metric names tool_errors/<kind>)
ERROR_KINDS = ("malformed", "unknown_tool", "bad_arguments", "exception", "timeout",
               "exit", "limit", "sandbox")  # the python tool's program: a non-zero exit, a limit, a refusal


def _call_one(tool: Tool, arguments: dict) -> CallResult:
    try:
        return CallResult(str(tool.call(arguments)), None, tool.name)
    except ToolError as e:
        return CallResult(f"Error: {e}", e.kind, tool.name)
    except (Exception, SystemExit) as e:  # a tool's bug (a sys.exit too) is the model's error message, not a crash
        return CallResult(f"Error: {failure(e)}", "exception", tool.name)


def run_calls(calls: list[tuple[Tool, dict]]) -> list[CallResult]:
    """Run tool calls concurrently, each bounded by its tool's timeout_s.

    Each call runs in a daemon thread: a call that overruns is reported as a timeout and left
    behind (Python cannot kill a thread; a daemon thread never blocks the process's exit). Tools
    that run untrusted code must bound themselves in a subprocess (tools/sandbox.py)."""
    results: list[Any] = [None] * len(calls)

    def work(i: int, tool: Tool, arguments: dict) -> None:
        results[i] = _call_one(tool, arguments)

    threads = [threading.Thread(target=work, args=(i, t, a), daemon=True) for i, (t, a) in enumerate(calls)]
    start = time.monotonic()
    for th in threads:
        th.start()
    out = []
    for i, (th, (tool, _)) in enumerate(zip(threads, calls)):
        th.join(max(0.0, start + tool.timeout_s - time.monotonic()))  # all calls run at once: one shared clock
        done = results[i]  # read once: an overrunning thread may still write its slot later
        out.append(done if done is not None else
                   CallResult(f"Error: the tool timed out after {tool.timeout_s:g} s", "timeout", tool.name))
    return out
