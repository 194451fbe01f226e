"""The config reference page (docs/reference/config.md) is generated from the schema `--help` reads, and the
committed page is what the generator prints now."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from hybridrl.cli import build_parser
from hybridrl.config.fields import doc
from hybridrl.config.reference import _section_table, key_rows, main, render_markdown
from hybridrl.config.schema import RLConfig

REPO = Path(__file__).resolve().parents[3]


@dataclass
class _Inner:
    """What the inner section is for."""
    rate: float = doc(0.5, "how fast", gt=0)
    mode: str = doc("a", "which way", choices=("a", "b|c"))


@dataclass
class _Outer:
    inner: _Inner = field(default_factory=_Inner)
    limit: Optional[int] = doc(None, "at most this many", ge=1)


def test_a_small_schema_renders_one_table_per_section_with_default_type_and_help():
    lines = _section_table(_Outer, "`demo`", "intro")
    # sections in declaration order; the docstring written by hand is kept, the pipe in a choice escaped
    assert lines == ["## `demo`", "", "intro",
                     "", "### `inner`", "", "What the inner section is for.", "",
                     "| key | default | type; valid values | meaning |", "| --- | --- | --- | --- |",
                     "| `rate` | `0.5` | a number; > 0 | how fast |",
                     "| `mode` | `'a'` | a string; one of a, b\\|c | which way |",
                     "", "### `(top level)`", "",
                     "| key | default | type; valid values | meaning |", "| --- | --- | --- | --- |",
                     "| `limit` | `None` | an integer or null; at least 1 | at most this many |", ""]


def test_train_help_and_the_page_list_the_same_keys_with_the_same_text():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["train"]
    rows = list(key_rows(RLConfig))
    assert len(rows) > 150  # every leaf of the train schema, not a sample
    page = render_markdown()
    for row in rows:
        assert f"  {row.key} = {row.default!r}\n      {row.help} ({row.kind})" in sub.epilog
        assert f"| `{row.key.rpartition('.')[2]}` | `{repr(row.default).replace('|', chr(92) + '|')}` |" in page


def test_the_committed_page_is_the_generators_output():
    """Fails when a key, default or help text changed without `make docs` (which rewrites the page)."""
    committed = (REPO / "docs" / "reference" / "config.md").read_text()
    assert committed == render_markdown(), "docs/reference/config.md is stale: run `make docs` and commit it"


def test_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    page = tmp_path / "config.md"
    assert main(["--output", str(page)]) == 0
    assert main(["--output", str(page), "--check"]) == 0
    page.write_text(page.read_text().replace("most tokens generated per response", "edited by hand"))
    assert main(["--output", str(page), "--check"]) == 1
    assert "differs from the schema: run make docs" in capsys.readouterr().out


@pytest.mark.parametrize("key", ["data.max_response_length", "actor_rollout_ref.actor.clip_ratio", "trainer.seed"])
def test_the_page_has_a_heading_for_each_keys_section(key):
    assert f"### `{key.rpartition('.')[0]}`" in render_markdown()
