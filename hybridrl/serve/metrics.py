"""The server's counters, read at GET /metrics in Prometheus' text format (vLLM's servers answer there too)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


@dataclass
class Counters:
    """Totals since the server started (`hybridrl_serve_<name>_total`)."""

    tool_calls: int = 0  # calls returned as message.tool_calls
    malformed_tool_calls: int = 0  # call blocks the model broke (bad JSON, no name, never closed): sent as text
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def prometheus(self) -> str:
        lines = []
        for f in fields(self):
            if not f.name.startswith("_"):
                metric = f"hybridrl_serve_{f.name}_total"
                lines += [f"# TYPE {metric} counter", f"{metric} {getattr(self, f.name)}"]
        return "\n".join(lines) + "\n"
