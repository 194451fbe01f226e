"""The fenced blocks of README.md and docs/**/*.md, and what the docs test does with each (docs/contributing.md
explains the scheme to writers):

- ```bash / ```python: executed, in order, in one working folder per page (the fixture data under
  data/arithmetic, `hybridrl` on PATH running this checkout);
- ```console: each `$ command` is executed and its output (stdout and stderr) must equal the lines under it;
  a line `...` stands for any number of lines;
- ```text: what a command prints, or a layout; never executed. ```json: example rows; each must parse.
  ```yaml: a config file's text; it must parse;
- a bash/console/python block right after `<!-- not-run: REASON -->` is not executed; its `hybridrl train`,
  `hybridrl plan` and `make train ARGS="..."` command lines must pass `hybridrl plan` (config checks, no
  training). `<!-- not-run, no-plan: REASON -->` skips that too (the reason says why plan cannot check it,
  e.g. a model folder an earlier command writes);
- any other block (no language, or another language) fails the test."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

EXECUTED = ("bash", "console", "python")
NOT_EXECUTED = ("text", "json", "yaml")
MARKER = re.compile(r"^<!--\s*not-run(?P<noplan>,\s*no-plan)?:\s*(?P<reason>.*?)\s*-->$")


@dataclass
class Block:
    path: Path  # the Markdown file
    line: int  # 1-based line of the opening fence
    lang: str  # the fence's info string ("" when none)
    code: str  # the block's text, fence lines excluded
    not_run: Optional[str] = None  # the marker's reason, when the block is marked not-run
    plan: bool = True  # a not-run block's train commands are checked with `hybridrl plan`

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the not-run marker on the last non-blank line before it."""
    lines = path.read_text().split("\n")
    out, i, previous = [], 0, ""
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            indent = len(line) - len(line.lstrip())
            start, lang, body = i + 1, line.strip()[3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            mark = MARKER.match(previous.strip())
            out.append(Block(path, start, lang, "\n".join(body), mark and mark["reason"],
                             not (mark and mark["noplan"])))
            previous = ""
        elif line.strip():
            previous = line
        i += 1
    return out


def problem(block: Block) -> Optional[str]:
    """Why a block breaks the scheme (None when it follows it)."""
    if block.lang not in EXECUTED + NOT_EXECUTED:
        return (f"{block.where}: a ```{block.lang} block; use bash/console/python (executed), text (output), json or "
                "yaml, and mark a block that must not run with <!-- not-run: REASON -->")
    if block.not_run is not None and not block.not_run:
        return f"{block.where}: <!-- not-run: --> needs a reason"
    if block.not_run is not None and block.lang not in EXECUTED:
        return f"{block.where}: a ```{block.lang} block is never run; drop its not-run marker"
    return None


def joined_lines(code: str) -> list[str]:
    """Shell lines with backslash continuations joined and comments after the command kept out."""
    out, current = [], ""
    for raw in code.split("\n"):
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        out.append(current)
        current = ""
    return out + ([current] if current else [])


def console_steps(code: str) -> list[tuple[str, list[str]]]:
    """[(command, expected output lines)] of a ```console block: `$ ` starts a command."""
    steps: list[tuple[str, list[str]]] = []
    for line in joined_lines(code):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"output before the first `$ command`: {line!r}")
    return steps


_TRAIN = re.compile(r"(?:^|[\s/])hybridrl\s+(train|plan)\b(?P<rest>.*)$")
_MAKE = re.compile(r"\bmake\s+train\b(?P<rest>.*)$")


def train_overrides(code: str) -> list[list[str]]:
    """The arguments after `hybridrl train|plan` (or inside `make train ARGS="..."`) on each command line."""
    found = []
    for line in joined_lines(code):
        line = line[2:] if line.startswith("$ ") else line
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        text = " ".join(shlex.quote(w) for w in words)
        if m := _TRAIN.search(text):
            args = shlex.split(m["rest"])
            found.append(args[:_end(args)])
        elif m := _MAKE.search(text):
            args = [a[len("ARGS="):] for a in shlex.split(m["rest"]) if a.startswith("ARGS=")]
            found.append(shlex.split(args[0]) if args else [])
    return found


def _end(args: list[str]) -> int:
    """Where a command's own arguments end (a pipe, a redirect, a second command)."""
    for i, a in enumerate(args):
        if a in ("&", "&&", "|", ";", ">", "2>&1") or a.startswith(">"):
            return i
    return len(args)


def match_output(expected: list[str], actual: list[str]) -> bool:
    """The printed text equals the expected text up to whitespace (so a page may wrap a long line), where an
    expected line `...` stands for any text."""
    segments, current = [], []
    for line in expected:
        if line.strip() == "...":
            segments.append(_words(current))
            current = []
        else:
            current.append(line)
    segments.append(_words(current))
    text = _words(actual)
    if len(segments) == 1:
        return text == segments[0]
    first, *middle, last = segments
    if not (text.startswith(first) and text.endswith(last)):
        return False
    pos, end = len(first), len(text) - len(last)
    for seg in middle:
        pos = text.find(seg, pos)
        if pos < 0:
            return False
        pos += len(seg)
    return pos <= end


def json_values(code: str) -> list:
    """The JSON values of a block, one after another (JSONL, or objects spread over lines); ValueError if any
    text is not JSON."""
    import json

    decoder, values, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(code) and code[pos].isspace():
            pos += 1
        if pos == len(code):
            return values
        value, pos = decoder.raw_decode(code, pos)
        values.append(value)


def _words(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())
