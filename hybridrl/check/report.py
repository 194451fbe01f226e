"""The report of `hybridrl check`: one line per check (✓ / ✗ / –, its name, its time, what it found), the
details indented under it, a ✗'s fix; and the same as JSON."""

from __future__ import annotations

import json
from typing import Optional

from hybridrl.check.result import FAIL, MARKS, NA, PASS, Result

WIDTH = 12  # the longest check name ("environment") and a space


def result_lines(r: Result) -> list[str]:
    lines = [f"{r.mark} {r.name:<{WIDTH}}{r.seconds:6.1f}s  {r.summary}"]
    pad = " " * (2 + WIDTH + 9)
    lines += [f"{pad}{d}" for d in r.details]
    if r.status == FAIL and r.fix:
        lines.append(f"{pad}fix: {r.fix}")
    return lines


def summary_line(results: list[Result], wall_s: float, cpu_s: float) -> str:
    count = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, NA)}
    verdict = "FAILED" if count[FAIL] else "passed"
    return (f"check {verdict}: {count[PASS]} {MARKS[PASS]}, {count[FAIL]} {MARKS[FAIL]}, {count[NA]} {MARKS[NA]} "
            f"in {wall_s:.0f} s (cpu {cpu_s:.0f} s)")


def to_json(results: list[Result], header: dict, wall_s: float, cpu_s: float) -> str:
    return json.dumps({**header, "passed": not any(r.status == FAIL for r in results), "seconds": round(wall_s, 2),
                       "cpu_seconds": round(cpu_s, 2), "checks": [r.to_json() for r in results]}, indent=2)


def exit_code(results: list[Result]) -> int:
    """1 on any ✗, else 0."""
    return 1 if any(r.status == FAIL for r in results) else 0


def na_count(results: list[Result]) -> int:
    return sum(r.status == NA for r in results)


def header_lines(header: dict, twin: Optional[str]) -> list[str]:
    out = [f"hybridrl check: {header['model']} ({header['architecture']})"]
    if twin:
        out.append(f"  on a shrunk twin: {twin}; random weights, the real tokenizer and chat template")
    return out
