"""A verl launch script's training command as config overrides, read without running anything.

verl's examples are bash scripts: a few variable assignments, then one long command,

    gsm8k_train_path=$HOME/data/gsm8k/train.parquet
    train_files="['$gsm8k_train_path', '$math_train_path']"
    python3 -m verl.trainer.main_ppo \\
        algorithm.adv_estimator=grpo \\
        data.train_files="$train_files" \\
        ... $@

`hybridrl check run.sh key=value ...` takes such a script where `train` takes key=value items. This
module reads it the way bash would for this straight-line subset: backslash-newline continues a line,
`#` starts a comment, quotes group and protect, `NAME=value` / `export NAME=value` assign (the
environment is the starting point, so `${NAME:-default}` takes the environment's value when it has
one), and `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:=default}`, `$((arithmetic))` and `~` expand
outside single quotes; unquoted expansions split at whitespace. The training command is the one with
the most dotted key=value items; its other words (the program, flags, `"$@"`) are dropped.

Nothing is executed: a `$(...)` command substitution, a backquote, or a variable that is unset with no
default cannot be known. That is an error only where the training command needs it, naming the line
and the remedy (set the variable in the environment, or pass the key on the command line: an item
given there replaces the script's).
"""

from __future__ import annotations

import ast
import bisect
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

from hybridrl.errors import HybridRLError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_DOTTED_ITEM = re.compile(r"\+{0,2}[A-Za-z_][\w-]*(\.[\w-]+)+=", re.ASCII)  # verl's (Hydra's) key=value items
_ARRAY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(")  # NAME=( or NAME+=( starts an array assignment
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}  # builtins whose NAME=value words assign
_OPERATORS = ";&|"  # end a simple command (; & && | ||)
UNKNOWN = "\x00"  # stands in the text of a word for what could not be expanded


class _SyntaxProblem(Exception):
    """A quote or bracket never closed (script_items names the file)."""


@dataclass
class Word:
    """One shell word after expansion; `problems` say what part of it could not be known (and why)."""

    text: str
    line: int  # the script line the word starts on (1-based)
    problems: list[str] = field(default_factory=list)


@dataclass
class Item:
    """A key=value item of the training command."""

    key: str  # the dotted key as written (a leading + or ++ kept)
    word: Word


def split_script_items(items: list[str], env: Optional[Mapping[str, str]] = None) -> tuple[list[str], Optional[str]]:
    """(overrides, source): when items[0] names a verl launch script (`*.sh`), the key=value items of its
    training command followed by items[1:] (those come last, so the command line's own values win), and
    the script's path; else (items, None). `env`: the environment the script would start with (default:
    os.environ). Raises HybridRLError for a missing script, one without a training command, or an item
    of it that cannot be read without running the script (and that the command line does not replace)."""
    if not items or not items[0].endswith(".sh"):
        return list(items), None
    path, rest = items[0], list(items[1:])
    if not os.path.isfile(path):
        raise HybridRLError(f"{path}: no such launch script; give the path of a verl-style .sh file (or key=value "
                            "items)")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    given = {_bare_key(i.split("=", 1)[0]) for i in rest if "=" in i}
    return [_resolved(path, item, given) for item in script_items(text, path, env)
            if not (item.word.problems and _bare_key(item.key) in given)] + rest, path


def script_items(text: str, path: str = "script", env: Optional[Mapping[str, str]] = None) -> list[Item]:
    """The dotted key=value items of the script's training command (the command with the most of them),
    in order; an item may carry problems (an unknown part). Raises HybridRLError if no command has any."""
    _refuse_broken_continuation(text, path)
    best: list[Item] = []
    try:
        for words in _commands(text, _Scope(os.environ if env is None else env)):
            found = [Item(w.text.split("=", 1)[0], w) for w in words if _DOTTED_ITEM.match(w.text)]
            if found and len(found) >= len(best):  # a tie: the later command (set-up commands come first)
                best = found
    except _SyntaxProblem as e:
        raise HybridRLError(f"{path} {e}; bash would refuse the script too: fix its quoting") from None
    if not best:
        raise HybridRLError(f"{path}: no command with dotted key=value items (such as `python3 -m "
                            "verl.trainer.main_ppo algorithm.adv_estimator=grpo ...`); give the script that "
                            "launches training, or pass the keys themselves")
    return best


def _bare_key(key: str) -> str:
    return key.lstrip("+")


def _resolved(path: str, item: Item, given: set[str]) -> str:
    """The item's text, or the error naming its line and what to do when part of it is unknown."""
    if not item.word.problems:
        return item.word.text
    key = _bare_key(item.key)
    raise HybridRLError(f"{path} line {item.word.line}: {key} cannot be read without running the script: "
                        f"{'; '.join(dict.fromkeys(item.word.problems))}; pass {key}=... on the command line after "
                        "the script (it replaces the script's value)")


def _refuse_broken_continuation(text: str, path: str) -> None:
    """A space after a line-ending backslash escapes the space instead of the newline: bash ends the command
    there and runs the rest of the items as another command. Say so rather than read half a command."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if re.search(r"(?<!\\)\\[ \t]+$", line) and _DOTTED_ITEM.match(lines[i + 1].strip()):
            raise HybridRLError(f"{path} line {i + 1}: a space follows the line-continuing backslash, so bash ends "
                                "the command on this line and never passes the next lines' items; delete the space")


# ---- the lexer: words of simple commands, expanded as bash would ------------------------------------------------
class _Scope:
    """The shell variables: the environment, then the script's assignments. A value that could not be known
    keeps why (`problems`), so every later use of the variable carries the reason."""

    def __init__(self, env: Mapping[str, str]):
        self.values: dict[str, str] = dict(env)
        self.problems: dict[str, list[str]] = {}
        self.arrays: dict[str, list[Word]] = {}  # NAME=( ... ): the elements as words

    def get(self, name: str) -> Optional[tuple[str, list[str]]]:
        if name not in self.values:
            return None
        return self.values[name], list(self.problems.get(name, []))

    def set(self, name: str, value: str, problems: list[str]) -> None:
        self.values[name] = value
        self.problems[name] = list(problems)


def _commands(text: str, scope: _Scope) -> Iterator[list[Word]]:
    """Each simple command's words (assignment words applied to `scope` and left out), in order; the
    assignments of a command take effect before the next command is read, as in bash."""
    lexer = _Lexer(text, scope)
    while not lexer.done():
        args = _apply_assignments(lexer.command(), scope)
        if args:
            yield args


def _apply_assignments(words: list[Word], scope: _Scope) -> list[Word]:
    """Apply leading NAME=value words (and all those of export/declare/...); the rest of the command's words.
    (A NAME=value prefix of a command is the command's environment in bash; kept here too: harmless.)"""
    i = 0
    while i < len(words) and (m := _ASSIGNMENT.fullmatch(words[i].text)):
        scope.set(m.group(1), m.group(2), words[i].problems)
        i += 1
    rest = words[i:]
    if rest and rest[0].text in _DECLARE:
        for w in rest[1:]:
            if (m := _ASSIGNMENT.fullmatch(w.text)) is not None:
                scope.set(m.group(1), m.group(2), w.problems)
        return []
    return rest


class _Lexer:
    """Reads bash words from `text` (the whole script), expanding them with `scope` as it goes."""

    def __init__(self, text: str, scope: _Scope):
        self.s, self.i, self.scope = text, 0, scope
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def done(self) -> bool:
        return self.i >= len(self.s)

    def line(self, at: Optional[int] = None) -> int:
        return bisect.bisect_left(self.newlines, self.i if at is None else at) + 1

    def command(self) -> list[Word]:
        """The words up to the end of the next simple command (newline, ; & | or the end)."""
        words: list[Word] = []
        while not self.done():
            c = self.s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self.s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "\n" or c in _OPERATORS:
                self.i += 1
                while not self.done() and self.s[self.i] in _OPERATORS:
                    self.i += 1
                if words:
                    return words
            elif c == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            elif c in "<>":
                self._skip_redirection()
            elif (m := _ARRAY.match(self.s, self.i)) is not None:
                self.i = m.end()
                self._array(m.group(1), append=bool(m.group(2)))
            else:
                words += self._word()
        return words

    def _array(self, name: str, append: bool) -> None:
        """NAME=( word ... ) or NAME+=( ... ), over any number of lines (verl's newer scripts group keys so)."""
        elements = list(self.scope.arrays.get(name, [])) if append else []
        while True:
            while not self.done() and (self.s[self.i] in " \t\n" or self.s.startswith("\\\n", self.i)):
                self.i += 2 if self.s[self.i] == "\\" else 1
            if self.done():
                raise _SyntaxProblem(f"line {self.line()}: the array {name}=( is never closed")
            if self.s[self.i] == ")":
                self.i += 1
                break
            if self.s[self.i] == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
                continue
            elements += self._word(stop=")")
        self.scope.arrays[name] = elements

    def _skip_redirection(self) -> None:
        """`> file`, `2>&1`, `>> log`: the operator and its target are not arguments."""
        while not self.done() and self.s[self.i] in "<>&":
            self.i += 1
        while not self.done() and self.s[self.i] in " \t":
            self.i += 1
        if not self.done() and self.s[self.i] not in "\n" + _OPERATORS:
            self._word()

    # ---- one word -----------------------------------------------------------------------------------------
    def _word(self, stop: str = "") -> list[Word]:
        """The fields one word makes (an unquoted expansion may split it, an empty one remove it); `stop`:
        more characters that end it (an array's closing parenthesis)."""
        self.fields: list[Word] = []
        self.cur, self.quoted = Word("", self.line()), False
        if self.s[self.i] == "~" and (self.i + 1 == len(self.s) or self.s[self.i + 1] in "/ \t\n"):
            self.i += 1
            self._add(self._lookup("HOME"), split=False)
        while not self.done() and self.s[self.i] not in " \t\n<>" + _OPERATORS + stop:
            c = self.s[self.i]
            if c == "'":
                self._single()
            elif c == '"':
                self._double()
            elif c == "\\":
                if not self.s.startswith("\\\n", self.i):
                    self.cur.text += self.s[self.i + 1:self.i + 2]
                self.i += 2
            elif c == "$":
                self._dollar(split=True)
            elif c == "`":
                self._backquote()
            else:
                self.cur.text += c
                self.i += 1
        self._end_field()
        return self.fields

    def _add_fields(self, words: list[Word]) -> None:
        """An array's elements: each its own word (the first joins what precedes it, as in bash)."""
        for k, w in enumerate(words):
            if k:
                self._end_field()
            self.cur.text += w.text
            self.cur.problems += w.problems

    def _end_field(self) -> None:
        if self.cur.text or self.quoted:
            self.fields.append(self.cur)
        self.cur, self.quoted = Word("", self.line()), False

    def _add(self, value: tuple[str, list[str]], split: bool) -> None:
        text, problems = value
        self.cur.problems += problems
        if not split:
            self.cur.text += text
            return
        parts = re.split(r"[ \t\n]+", text)  # bash's field splitting of an unquoted expansion (default IFS)
        self.cur.text += parts[0]
        for part in parts[1:]:
            self._end_field()
            self.cur.text += part
            self.cur.problems += problems

    def _single(self) -> None:
        end = self.s.find("'", self.i + 1)
        if end < 0:
            raise _SyntaxProblem(f"line {self.line()}: a single quote is never closed")
        self.cur.text += self.s[self.i + 1:end]
        self.quoted, self.i = True, end + 1

    def _double(self) -> None:
        start, self.quoted = self.line(), True
        self.i += 1
        while not self.done() and self.s[self.i] != '"':
            c = self.s[self.i]
            if c == "\\" and self.s[self.i + 1:self.i + 2] in ('"', "\\", "$", "`", "\n"):
                self.cur.text += "" if self.s[self.i + 1] == "\n" else self.s[self.i + 1]
                self.i += 2
            elif c == "$":
                self._dollar(split=False)
            elif c == "`":
                self._backquote()
            else:
                self.cur.text += c
                self.i += 1
        if self.done():
            raise _SyntaxProblem(f"line {start}: a double quote is never closed")
        self.i += 1

    def _backquote(self) -> None:
        end = self.s.find("`", self.i + 1)
        cmd = self.s[self.i + 1:len(self.s) if end < 0 else end]
        self.i = len(self.s) if end < 0 else end + 1
        self._add(_unknown(f"`{cmd.strip()[:40]}` is a command substitution, which check does not run"), split=False)

    # ---- $ expansions --------------------------------------------------------------------------------------
    def _dollar(self, split: bool) -> None:
        s, at = self.s, self.i
        if s.startswith("$((", at):
            end = self._closing(at + 1)
            self.i = end + 1
            self._add(self._arithmetic(s[at + 3:end - 1], at), split)
        elif s.startswith("$(", at):
            end = self._closing(at + 1)
            self.i = end + 1
            if s[at + 2:end].strip() == "pwd":  # known without running it: the directory check runs in
                self._add(self.scope.get("PWD") or (os.getcwd(), []), split)
                return
            self._add(_unknown(f"$({s[at + 2:end].strip()[:40]}) is a command substitution, which check does not "
                               "run"), split)
        elif s.startswith("${", at):
            end = self._closing(at + 1, "{}")
            self.i = end + 1
            body = s[at + 2:end]
            if (m := re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*]|[0-9]+)\]", body)) is not None:
                elements = self.scope.arrays.get(m.group(1), [])
                index = m.group(2)
                self._add_fields(elements if index in "@*" else elements[int(index):int(index) + 1])
            else:
                self._add(self._braced(body, at), split)
        elif at + 1 < len(s) and s[at + 1] in "@*#?$!0123456789":
            self.i = at + 2  # "$@": the script's arguments, which are the items after it here; $1: unset
            self._add(("0" if s[at + 1] == "#" else "", []), split)
        elif (m := _NAME.match(s, at + 1)) is not None:
            self.i = m.end()
            self._add(self._lookup(m.group()), split)
        else:
            self.cur.text += "$"
            self.i += 1

    def _closing(self, open_at: int, pair: str = "()") -> int:
        """The index of the bracket closing the one at open_at (quotes and nesting respected)."""
        depth, i = 0, open_at
        while i < len(self.s):
            c = self.s[i]
            if c in "'\"":
                close = self.s.find(c, i + 1)
                i = len(self.s) if close < 0 else close
            elif c == pair[0]:
                depth += 1
            elif c == pair[1]:
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise _SyntaxProblem(f"line {self.line(open_at)}: a ${pair[0]} is never closed")

    def _braced(self, body: str, at: int) -> tuple[str, list[str]]:
        """${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:=default}, ${NAME=default}."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:(:?[-=])(.*))?", body, re.DOTALL)
        if m is None:
            return _unknown(f"${{{body}}} is an expansion check does not read (it reads $NAME, ${{NAME}} and "
                            "${NAME:-default})")
        name, op, default = m.group(1), m.group(2), m.group(3)
        value = self.scope.get(name)
        if op is None or not (value is None or (op.startswith(":") and value[0] == "")):
            return self._lookup(name)
        expanded = _Lexer(default, self.scope)._expand_default(self.line(at))
        if op.endswith("="):
            self.scope.set(name, *expanded)
        return expanded

    def _expand_default(self, line: int) -> tuple[str, list[str]]:
        """This lexer's text as the word a ${NAME:-default}'s default makes (quotes and $ expanded)."""
        self.fields, self.cur, self.quoted = [], Word("", line), False
        while not self.done():
            c = self.s[self.i]
            if c == "'":
                self._single()
            elif c == '"':
                self._double()
            elif c == "$":
                self._dollar(split=False)
            else:
                self.cur.text += c
                self.i += 1
        return self.cur.text, self.cur.problems

    def _lookup(self, name: str) -> tuple[str, list[str]]:
        found = self.scope.get(name)
        if found is None:
            return _unknown(f"${name} is not set and has no default (set {name} in the environment)")
        return found

    def _arithmetic(self, expr: str, at: int) -> tuple[str, list[str]]:
        """$((expr)): integer + - * / % ** and parentheses over numbers and variables, evaluated by walking
        Python's ast (never eval); bash's / truncates toward zero."""
        text, problems = _Lexer(expr, self.scope)._expand_default(self.line(at))
        names = [self.scope.get(n) for n in _NAME.findall(text)]
        problems += [p for found in names if found is not None for p in found[1]]
        if problems:
            return UNKNOWN, problems
        # bare names are variables (unset or empty: 0)
        text = _NAME.sub(lambda m: (self.scope.get(m.group()) or ("",))[0] or "0", text)
        try:
            return str(_integer(ast.parse(text.strip(), mode="eval").body)), []
        except (SyntaxError, ValueError, ZeroDivisionError):
            return _unknown(f"$(({expr.strip()})) is arithmetic check cannot evaluate")


def _unknown(reason: str) -> tuple[str, list[str]]:
    return UNKNOWN, [reason]


def _c_div(a: int, b: int) -> int:
    """Integer division truncating toward zero (C's and bash's; Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow,
            ast.Div: _c_div, ast.Mod: lambda a, b: a - b * _c_div(a, b)}


def _integer(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _integer(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        right = _integer(node.right)
        if isinstance(node.op, ast.Pow) and not 0 <= right <= 256:
            raise ValueError("exponent out of range")
        return _INT_OPS[type(node.op)](_integer(node.left), right)
    raise ValueError("not integer arithmetic")
