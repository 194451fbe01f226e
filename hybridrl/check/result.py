"""What one check found: ✓ (it proved its invariant on this config), ✗ (it did not: what is wrong and the
fix) or – (not applicable to this config: why)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

PASS, FAIL, NA = "pass", "fail", "n/a"
MARKS = {PASS: "✓", FAIL: "✗", NA: "–"}


@dataclass
class Result:
    status: str  # PASS | FAIL | NA
    summary: str  # one line: what was proved, what is wrong, or why the check does not apply
    details: list[str] = field(default_factory=list)  # measured values, the first divergence, each problem
    fix: Optional[str] = None  # a FAIL's remedy: the key to set or what to change
    name: str = ""  # filled by the runner
    seconds: float = 0.0  # wall time of the check, filled by the runner
    cpu_seconds: float = 0.0  # this process's CPU time during the check

    @property
    def mark(self) -> str:
        return MARKS[self.status]

    def to_json(self) -> dict:
        return asdict(self)


def passed(summary: str, *details: str) -> Result:
    return Result(PASS, summary, list(details))


def failed(summary: str, *details: str, fix: Optional[str] = None) -> Result:
    return Result(FAIL, summary, list(details), fix)


def not_applicable(reason: str, *details: str) -> Result:
    return Result(NA, reason, list(details))


def combine(parts: list[Result], summary_ok: str) -> Result:
    """Several sub-proofs of one check as one line: failed if any failed (their summaries joined, every detail
    and fix kept), else passed with `summary_ok` and every part's detail; all not applicable stays so."""
    bad = [p for p in parts if p.status == FAIL]
    if bad:
        fixes = [p.fix for p in bad if p.fix]
        return failed("; ".join(p.summary for p in bad), *[d for p in parts for d in p.details],
                      fix="; ".join(dict.fromkeys(fixes)) or None)
    if parts and all(p.status == NA for p in parts):
        return not_applicable("; ".join(p.summary for p in parts))
    details = [d for p in parts for d in ([p.summary] if p.status == PASS else [f"not applicable: {p.summary}"]) + p.details]
    return passed(summary_ok, *details)
