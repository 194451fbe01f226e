"""What the prose of README.md and docs/**/*.md names in backticks exists. The docs test runs the code blocks
(tests/integration/test_docs_commands.py); this one reads the text around them. Outside fenced blocks and HTML
comments, each `inline code` span is a claim when it has one of these shapes:

- a command, `hybridrl SUB ...` (also after a path: `.venv/bin/hybridrl train`): SUB, and a nested one
  (`hybridrl data gsm8k`), is a subcommand of the parser hybridrl/cli.py builds, and each `--flag` is an option of
  that command; `a|b` alternatives are each checked; `[...]`, `...` and `<...>` are skipped, as are the
  positional words of a command without subcommands; its `key=value` words are config keys (below);
- a config key, `section.key` or `section.key=value` whose first segment is a section of a schema (RLConfig,
  SFTConfig, RMConfig, read through the loader's valid_keys): it is a key or a group of keys of one of them, with
  `{a,b}` alternatives and `*` globs, or a dotted tail of one (`rollout.n` for actor_rollout_ref.rollout.n: the
  docs shorten keys so). A key without a schema field that the loader's verl judge answers (verl's table:
  accepted as inert, or refused with its reason) exists only where its paragraph (list item, table row, run of
  lines) says "verl": a doc may name verl's keys, but not pass one off as hybridrl's. Not keys: a span whose last
  segment is a file extension (`critic.py`), and those in NOT_KEYS;
- a Python name, `hybridrl.x.y`, or a call of one (`hybridrl.train(..., agent=fn)`): it imports or resolves as an
  attribute; each `name=` of a call is one of its parameters (unless it takes **kwargs); a signature shown with
  `->` lists all its parameters, in order;
- a package path, `hybridrl/x/y.py`, or one relative to the package (`trainer/launch.py`): the file exists;
- a sentence that says something is missing (MISSING: "not there yet", "not yet supported", "not implemented",
  "coming soon", "TODO", ...) names in backticks no schema key, command or `hybridrl.*` name that exists, nor a
  `name=` keyword of a public function (hybridrl.__all__). A true one (what is refused is a combination or a
  value, not the thing) goes in TRUE_MISSING with its reason. A heading such as "## Not yet supported" is its own
  sentence: the paragraphs under it are not read as missing-claims.
Module paths are resolved when the test runs, never listed here: when a module moves, only its docs follow.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))

MISSING = re.compile(r"not (?:yet )?(?:there|here|supported|implemented|available|wired)(?: yet)?\b|not yet supported"
                     r"|coming soon|\bTODO\b|\bplanned\b", re.IGNORECASE)
# (page, token): why a sentence of MISSING names a thing that exists and is still true
TRUE_MISSING: dict[tuple[str, str], str] = {}
# spans that look like keys of a section but are something else, with what they are
NOT_KEYS = {
    "reward_model.ground_truth": "the answer field of a row in verl's data schema (a column, not a config key)",
    "reward_model.scores": "a method of the reward-model role (workers/roles.py), called on its group",
    "rollout.generate": "a call of a rollout worker (distributed/rollout_worker.py) that a timeout error names",
    "rollout.load_weights": "a call of a rollout worker (distributed/rollout_worker.py) that a timeout error names",
}
FILE_EXT = {"py", "md", "yaml", "yml", "json", "jsonl", "parquet", "png", "txt", "sh", "toml", "csv", "lock", "log",
            "safetensors", "pt", "bin", "gguf", "html", "svg", "pdf"}
SEGMENT = r"(?:[\w*]+|\{[^}`]*\})+"
KEY = re.compile(rf"^\+{{0,2}}(?P<key>[a-z_]\w*(?:\.{SEGMENT})+)(?:=.*)?$")
PY_NAME = re.compile(r"^hybridrl(?:\.\w+)+")


@dataclass(frozen=True)
class Span:
    page: str  # the Markdown file, relative to the repository
    line: int  # 1-based
    text: str  # the span's text, without its backticks (`\|` of a table cell read as `|`)
    paragraph: str  # its list item, table row or run of lines, joined
    sentence: str  # its sentence in that paragraph

    def problem(self, why: str) -> str:
        return f"{self.page}:{self.line}: `{self.text}`: {why}"


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph of prose: fenced blocks and HTML comments left out; a list item, a
    table row and a heading each start their own."""
    out: list[tuple[int, list[str]]] = []
    fenced = comment = False
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced, out = not fenced, out + [(number, [])]
            continue
        if comment or stripped.startswith("<!--"):
            comment = "-->" not in stripped
            continue
        if fenced or not stripped:
            out.append((number, []))
        elif stripped.startswith("#"):  # a heading is a paragraph of its own
            out += [(number, [stripped]), (number, [])]
        elif re.match(r"([-*+]|\d+\.|\|)\s?", stripped) or not out or not out[-1][1]:
            out.append((number, [stripped]))
        else:
            out[-1][1].append(stripped)
    return [(n, " ".join(lines)) for n, lines in out if lines]


def sentences(paragraph: str) -> list[str]:
    """The paragraph cut after `.`, `!` or `?` before a capital, a backtick, bold or a parenthesis."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", paragraph)


@lru_cache(maxsize=None)
def spans(page: Path) -> tuple[Span, ...]:
    rel, out = str(page.relative_to(REPO)), []
    lines = page.read_text().split("\n")
    for first, paragraph in paragraphs(page.read_text()):
        for sentence in sentences(paragraph):
            for m in re.finditer(r"`([^`]+)`", sentence):
                out.append(Span(rel, _line_of(lines, first, m.group(1)), m.group(1).replace(r"\|", "|").strip(),
                                paragraph, sentence))
    return tuple(out)


def _line_of(lines: list[str], first: int, code: str) -> int:
    return next((n for n in range(first, len(lines) + 1) if f"`{code}`" in lines[n - 1]), first)


def all_spans() -> list[Span]:
    return [s for page in PAGES for s in spans(page)]


# ---- config keys ----

@lru_cache(maxsize=None)
def schema_keys() -> tuple[frozenset[str], frozenset[str]]:
    """(leaf keys, groups) of every schema the CLI loads."""
    from hybridrl.config.loader import valid_keys
    from hybridrl.config.rm import RMConfig
    from hybridrl.config.schema import RLConfig
    from hybridrl.config.sft import SFTConfig

    leaves = frozenset(k for cls in (RLConfig, SFTConfig, RMConfig) for k in valid_keys(cls))
    groups = frozenset(k.rsplit(".", i)[0] for k in leaves for i in range(1, k.count(".") + 1))
    return leaves, groups


def sections() -> set[str]:
    return {k.split(".")[0] for k in schema_keys()[0]}


def expand(key: str) -> list[str]:
    """`a.{b,c}.d` -> [a.b.d, a.c.d] (each brace in turn)."""
    m = re.search(r"\{([^{}]*)\}", key)
    if not m:
        return [key]
    return [k for alt in m.group(1).split(",") for k in expand(key[:m.start()] + alt.strip() + key[m.end():])]


def in_schema(key: str) -> bool:
    leaves, groups = schema_keys()
    names = leaves | groups
    if key in names or any(n.endswith("." + key) for n in names):
        return True
    return "*" in key and any(fnmatch.fnmatchcase(n, key) or fnmatch.fnmatchcase(n, "*." + key) for n in names)


def verl_answers(key: str) -> bool:
    """The loader's verl judge (its table of verl's keys) answers the key, or the key as a tail under a group."""
    from hybridrl.config import loader

    unknown = object()  # any value: accepted or refused, the table knows the key
    return any(loader.judge_verl_key(k, unknown) is not None for k in [key, *(f"{g}.{key}" for g in schema_keys()[1])])


def key_of(text: str) -> Optional[str]:
    """The dotted key a span names, or None when it names none (another shape, a file, a NOT_KEYS span)."""
    m = KEY.match(text)
    if not m or text in NOT_KEYS or m["key"] in NOT_KEYS or m["key"].split(".")[0] not in sections():
        return None
    return None if m["key"].rsplit(".", 1)[-1] in FILE_EXT else m["key"]


def key_problem(key: str, paragraph: str) -> Optional[str]:
    for one in expand(key):
        if in_schema(one):
            continue
        if verl_answers(one):
            if not re.search(r"\bverl\b", paragraph, re.IGNORECASE):
                return f"{one} is verl's key, which hybridrl has no field for: say it is verl's, or name hybridrl's key"
            continue
        return f"{one} is no config key (hybridrl train --help lists them) nor a key of verl's table"
    return None


def test_config_keys_in_prose_exist():
    problems = [s.problem(why) for s in all_spans()
                if (key := key_of(s.text)) and (why := key_problem(key, s.paragraph))]
    problems += [s.problem(why) for s in all_spans() if (cmd := command_of(s.text))
                 for word in cmd.split() if (key := key_of(word)) and (why := key_problem(key, s.paragraph))]
    assert not problems, "\n".join(problems)


# ---- commands ----

@lru_cache(maxsize=None)
def parser():
    from hybridrl.cli import build_parser

    return build_parser()


def subcommands(p) -> dict[str, Any]:
    import argparse

    return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def command_problem(text: str) -> Optional[str]:
    """Why `hybridrl ...` is not a command of the CLI (None when its subcommands and flags exist)."""
    current = [parser()]
    for word in text.split()[1:]:
        word = word.strip("[](),")
        if not word or word in ("|", "...") or word.startswith(("<", "$")) or re.match(r"-\d", word):
            continue
        alternatives = [w for w in word.split("|") if w]
        if word.startswith("-"):
            for p in current:
                missing = [w.split("=")[0] for w in alternatives if w.split("=")[0] not in p._option_string_actions]
                if missing:
                    return f"{p.prog} has no option {missing[0]} (its options: {', '.join(p._option_string_actions)})"
        elif all(subcommands(p) for p in current):
            missing = [(p, w) for p in current for w in alternatives if w not in subcommands(p)]
            if missing:
                p, w = missing[0]
                return f"{p.prog} has no subcommand {w!r} (its subcommands: {', '.join(subcommands(p))})"
            current = [subcommands(p)[w] for p in current for w in alternatives]
    return None


def command_of(text: str) -> Optional[str]:
    """The `hybridrl ...` command a span holds (`.venv/bin/hybridrl train ...` too), or None."""
    m = re.search(r"(?:^|[\s/])(hybridrl \S.*)$", text)
    return m and m.group(1)


def test_commands_in_prose_exist():
    problems = [s.problem(why) for s in all_spans() if (cmd := command_of(s.text)) and (why := command_problem(cmd))]
    assert not problems, "\n".join(problems)


# ---- Python names ----

def resolve(dotted: str) -> Any:
    """The module or object `hybridrl.x.y` names (raises ImportError / AttributeError when none)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if not (e.name and ".".join(parts[:i]).startswith(e.name)):
                raise  # the module exists, and what it imports does not
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def arguments(text: str) -> list[str]:
    """The comma-separated words inside the first parentheses of `name(...)`, nested brackets kept whole."""
    out, depth, word = [], 0, ""
    for ch in text[text.index("(") + 1:]:
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if depth < 0:
            break
        if ch == "," and depth == 0:
            out, word = out + [word.strip()], ""
        else:
            word += ch
    return [w for w in out + [word.strip()] if w]


def signature_problem(text: str, obj: Any) -> Optional[str]:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None
    args = arguments(text)
    if "->" in text:  # a signature: the parameters as they are
        shown = [a.split("=")[0].strip() for a in args if a != "*"]
        real = [("**" if p.kind is p.VAR_KEYWORD else "*" if p.kind is p.VAR_POSITIONAL else "") + n
                for n, p in params.items()]
        if shown != real:
            return f"the signature is ({', '.join(real)})"
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    unknown = [a.split("=")[0] for a in args if re.match(r"\w+=", a) and a.split("=")[0] not in params]
    return f"takes no keyword {unknown[0]} (its parameters: {', '.join(params)})" if unknown else None


def python_problem(text: str) -> Optional[str]:
    dotted = PY_NAME.match(text)[0]
    try:
        obj = resolve(dotted)
    except (ImportError, AttributeError) as e:
        return f"{dotted} does not resolve ({type(e).__name__}: {e})"
    return signature_problem(text, obj) if "(" in text else None


def test_python_names_in_prose_resolve():
    problems = [s.problem(why) for s in all_spans() if PY_NAME.match(s.text) and (why := python_problem(s.text))]
    assert not problems, "\n".join(problems)


def package_path(text: str) -> Optional[Path]:
    """The file of the package a span names, `hybridrl/x/y.py` or `hybridrl/x/` or, relative to the package,
    `trainer/launch.py` (optionally `:function`), or None when it names none."""
    m = re.match(r"^(hybridrl/[\w./-]*|[a-z_]+/[\w/]*\w\.py)(?::\w+)?$", text)
    if not m:
        return None
    if text.startswith("hybridrl/"):
        return REPO / m.group(1)
    return REPO / "hybridrl" / m.group(1) if (REPO / "hybridrl" / m.group(1).split("/")[0]).is_dir() else None


def test_package_paths_in_prose_exist():
    problems = [s.problem("no such file or folder in the package") for s in all_spans()
                if (path := package_path(s.text)) and not path.exists()]
    assert not problems, "\n".join(problems)


# ---- "not there yet" ----

@lru_cache(maxsize=None)
def public_keywords() -> frozenset[str]:
    """Every parameter name of hybridrl's public functions and classes (hybridrl.__all__)."""
    import hybridrl

    names = set()
    for name in hybridrl.__all__:
        try:
            names |= set(inspect.signature(getattr(hybridrl, name)).parameters)
        except (TypeError, ValueError):
            continue
    return frozenset(names)


def present(text: str) -> Optional[str]:
    """What exists of the thing a span names (None: it names nothing that exists)."""
    if (key := key_of(text)) and all(in_schema(k) for k in expand(key)):
        return f"{key} is a config key"
    if (cmd := command_of(text)) and command_problem(cmd) is None:
        return "the command exists"
    if PY_NAME.match(text) and python_problem(text) is None:
        return f"{PY_NAME.match(text)[0]} exists"
    m = re.match(r"^(\w+)=", text)
    if m and m.group(1) in public_keywords():
        return f"{m.group(1)}= is a parameter of hybridrl's API"
    return None


def test_prose_does_not_call_a_present_thing_missing():
    problems = []
    for s in all_spans():
        if not MISSING.search(s.sentence) or (s.page, s.text) in TRUE_MISSING:
            continue
        if what := present(s.text):
            problems.append(s.problem(f"the sentence says {MISSING.search(s.sentence)[0]!r}, but {what}: "
                                      f"{s.sentence[:160]!r}"))
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_are_for():
    """Each check fails on a made-up line it exists for, so that a passing run means something."""
    assert present("agent=") and MISSING.search("`agent=` is not there yet.") and not present("no_such_kwarg=")
    assert command_problem("hybridrl plot --no-such-flag") and command_problem("hybridrl nosuch")
    assert command_problem("hybridrl data gsm8k|nosuch") and not command_problem("hybridrl data arithmetic|gsm8k")
    assert key_problem("trainer.no_such_key", "") and not key_problem("rollout.n", "")
    assert key_problem("actor_rollout_ref.rollout.mode", "a key") and not key_problem("actor_rollout_ref.rollout.mode",
                                                                                       "verl's key")
    assert python_problem("hybridrl.no_such_module") and python_problem("hybridrl.train(..., no_such=1)")
    assert python_problem("hybridrl.train(config) -> Run")
    assert not package_path("data/arithmetic/") and package_path("trainer/no_such.py").name == "no_such.py"
