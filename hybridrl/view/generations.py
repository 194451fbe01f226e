"""A step's dumped generations grouped by prompt, filtered and searched, for the viewer.

A dump writes the n responses of a prompt on consecutive rows (trainer/generations.py); a group is
a run of consecutive rows with the same prompt text. Only the step asked for is read (its lines
through the index), and the last few steps read are kept parsed in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import OrderedDict
from typing import Optional

from hybridrl.view.runs import GenerationSource, ViewError

_CACHED_STEPS = 16
_PREVIEW = 160  # characters of a prompt in the list
TOKEN_FIELDS = ("tokens", "token_logprobs", "token_trainer_logprobs", "token_entropy", "token_prob_gap", "token_trained")


@dataclasses.dataclass
class Group:
    """The responses to one prompt in one step."""

    key: str  # a short hash of the prompt text: the same prompt has the same key at every step
    input: str
    rows: list[dict]

    def summary(self, i: int) -> dict:
        scores = [r["score"] for r in self.rows if isinstance(r.get("score"), (int, float))]
        lengths = [r["response_length"] for r in self.rows if isinstance(r.get("response_length"), (int, float))]
        first = self.rows[0]
        return {"i": i, "key": self.key, "preview": self.input[-_PREVIEW:], "n": len(self.rows),
                "data_source": first.get("data_source"), "gts": _short(first.get("gts")),
                "score_mean": sum(scores) / len(scores) if scores else None,
                "length_mean": sum(lengths) / len(lengths) if lengths else None}


def prompt_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]


def _short(value) -> Optional[str]:
    return None if value is None else str(value)[:80]


def group_rows(rows: list[dict]) -> list[Group]:
    """Consecutive rows with the same "input" form one group."""
    groups: list[Group] = []
    for row in rows:
        text = str(row.get("input", ""))
        if groups and groups[-1].input == text:
            groups[-1].rows.append(row)
        else:
            groups.append(Group(prompt_key(text), text, [row]))
    return groups


@dataclasses.dataclass(frozen=True)
class Filter:
    """Which groups a list shows: all of them by default. A group matches when any response does."""

    query: str = ""  # case-insensitive text in the prompt, a response or the ground truth
    data_source: str = ""
    min_score: Optional[float] = None
    max_score: Optional[float] = None
    min_length: Optional[int] = None
    max_length: Optional[int] = None

    def keep(self, g: Group) -> bool:
        if self.data_source and g.rows[0].get("data_source") != self.data_source:
            return False
        return any(self._row_ok(g.input, r) for r in g.rows)

    def _row_ok(self, prompt: str, row: dict) -> bool:
        score, length = row.get("score"), row.get("response_length")
        if not _within(score, self.min_score, self.max_score) or not _within(length, self.min_length, self.max_length):
            return False
        if self.query:
            q = self.query.lower()
            return q in prompt.lower() or q in str(row.get("output", "")).lower() or q in str(row.get("gts", "")).lower()
        return True


def _within(value, lo, hi) -> bool:
    if lo is None and hi is None:
        return True
    if not isinstance(value, (int, float)):
        return False
    return (lo is None or value >= lo) and (hi is None or value <= hi)


class StepCache:
    """Parsed groups of recently read (run, kind, step)s."""

    def __init__(self):
        self._steps: OrderedDict[tuple, tuple[object, list[Group], int]] = OrderedDict()

    def groups(self, run_name: str, source: GenerationSource, step: int) -> tuple[list[Group], int]:
        """(groups of the step, rows skipped as not JSON). Raises ViewError for a step with no rows."""
        index, lines = source.step_lines(step)
        key = (run_name, source.kind, step)
        stamp = (len(lines), index.end if index is not None else 0)  # a step file still being written grows
        if (hit := self._steps.get(key)) is not None and hit[0] == stamp:
            self._steps.move_to_end(key)
            return hit[1], hit[2]
        if not lines:
            raise ViewError(f"no {source.kind} generations at step {step} (steps dumped: "
                            f"{_span(source.steps())})")
        rows, skipped = _parse(index, lines)
        groups = group_rows(rows)
        self._steps[key] = (stamp, groups, skipped)
        while len(self._steps) > _CACHED_STEPS:
            self._steps.popitem(last=False)
        return groups, skipped


def _parse(index, lines: list[int]) -> tuple[list[dict], int]:
    if lines == list(range(lines[0], lines[-1] + 1)):  # contiguous: one read
        raw = index.read(lines[0], lines[-1] + 1)
    else:
        raw = [index.read(i, i + 1)[0] for i in lines]
    rows, skipped = [], 0
    for line in raw:
        try:
            row = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            skipped += 1
    return rows, skipped


def _span(steps: list[int]) -> str:
    if not steps:
        return "none yet"
    return f"{steps[0]}..{steps[-1]} ({len(steps)} steps)" if len(steps) > 3 else ", ".join(map(str, steps))


def page(groups: list[Group], flt: Filter, offset: int, limit: int) -> dict:
    """One page of the groups `flt` keeps: their summaries, with the total kept."""
    kept = [(i, g) for i, g in enumerate(groups) if flt.keep(g)]
    return {"total": len(kept), "all": len(groups), "offset": offset,
            "prompts": [g.summary(i) for i, g in kept[offset:offset + limit]],
            "data_sources": sorted({str(g.rows[0].get("data_source")) for g in groups})}


def find(groups: list[Group], key: str) -> Optional[int]:
    return next((i for i, g in enumerate(groups) if g.key == key), None)
