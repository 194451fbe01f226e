"""Lone surrogates: code points U+D800..U+DFFF standing alone in a Python str.

JSON may spell one (`"\\ud83d"`): a client that cuts a string in the middle of an emoji (two UTF-16
code units, a surrogate pair) writes half of it, and json.loads returns that half as is. Such a str
has no UTF-8 form, so a tokenizer raises a bare TypeError on it and writing it to a UTF-8 file or
response fails. Text from outside (data rows, request bodies, tool answers) is checked here before it
reaches a tokenizer, so the error names where the bad character is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

_LONE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class LoneSurrogate:
    """Where a lone surrogate sits: the field path ('prompt[0].content'; '' for a bare string),
    the character's index in that string and its code point."""

    field: str
    position: int
    code_point: int

    def describe(self) -> str:
        return (f"a lone surrogate \\u{self.code_point:04x} at character {self.position} (half of a UTF-16 pair, "
                "left when text is cut inside an emoji or another character beyond U+FFFF); it has no UTF-8 form, "
                "so no tokenizer can read it")


def escaped(text: str) -> str:
    """`text` with each lone surrogate written as `\\udxxx`, so a field name holding one can be printed."""
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _child(field: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{field}[{key}]"
    name = escaped(str(key))
    return f"{field}.{name}" if field else name


def find_lone_surrogate(value: Any, field: str = "") -> Optional[LoneSurrogate]:
    """The first lone surrogate in a string or in the strings (keys included) of nested dicts and lists,
    in document order; None when all text is whole. Iterative: a deeply nested request body cannot
    exhaust the stack."""
    stack = [(value, field)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            m = _LONE.search(item)
            if m is not None:
                return LoneSurrogate(path, m.start(), ord(m.group()))
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                children += [(key, _child(path, key)), (child, _child(path, key))]
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(child, _child(path, i)) for i, child in enumerate(item)]))
    return None


def lone_surrogate_problem(row: dict) -> Optional[str]:
    """What is wrong with a data row holding a lone surrogate, with the fix; None when its text is whole."""
    found = find_lone_surrogate(row)
    if found is None:
        return None
    return f"field '{found.field}' holds {found.describe()}; restore the whole character or delete it"


def replace_lone_surrogates(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, as decoding with errors='replace' treats bad bytes."""
    return _LONE.sub("\ufffd", text)
