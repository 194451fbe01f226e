"""Every command and code block of README.md and docs/ is executed here, or marked not run with a reason (the
scheme: tests/integration/docs_blocks.py and docs/contributing.md). Executed pages run in a fresh folder with
the fixture data (never the repository's data/), one folder per page, each block under a timeout; a failure
names the file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybridrl.data.arithmetic import write_dataset

from tests.integration.docs_blocks import (EXECUTED, Block, blocks, console_steps, json_values, match_output,
                                           problem, train_overrides)

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))
TIMEOUT_S = 150  # per block; the page's blocks together stay well under the suite's 3-minute docs budget


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _executed(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in EXECUTED and b.not_run is None]


def _not_run(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.not_run is not None and b.plan]


def test_every_block_is_executed_or_marked_with_a_reason():
    problems = [p for page in PAGES for b in blocks(page) if (p := problem(b))]
    assert not problems, "\n".join(problems)


def test_json_and_yaml_blocks_parse():
    import yaml

    bad = []
    for block in (b for page in PAGES for b in blocks(page) if b.lang in ("json", "yaml")):
        try:
            if block.lang == "yaml":
                yaml.safe_load(block.code)
            else:
                json_values(block.code)
        except (ValueError, yaml.YAMLError) as e:
            bad.append(f"{block.where}: {e}")
    assert not bad, "\n".join(bad)


def plan_failures(not_run: list[Block], capsys) -> tuple[list[str], list[str]]:
    """Each train command of the blocks through `hybridrl plan` (in-process: config checks, placement, memory;
    no model weights, no training), from the current folder: (failures, commands skipped for an absent model)."""
    from hybridrl.cli import main

    failures, absent = [], []
    for block in not_run:
        for args in train_overrides(block.code):
            missing = [a.split("=", 1)[1] for a in args if a.split("=", 1)[-1].startswith("models/")
                       and not Path(a.split("=", 1)[1]).exists()]
            if missing:  # an optional model (`make smollm2`) this checkout lacks; CI has it
                absent.append(f"{block.where}: {missing[0]} absent")
                continue
            capsys.readouterr()
            if main(["plan", *args]) != 0:
                failures.append(f"{block.where}: hybridrl plan {' '.join(args)}\n{capsys.readouterr().err}")
    return failures, absent


@pytest.mark.parametrize("page", [p for p in PAGES if _not_run(p)], ids=_rel)
def test_not_run_train_commands_pass_plan(page, monkeypatch, capsys):
    """From the repository root, where their --config files are."""
    monkeypatch.chdir(REPO)
    failures, absent = plan_failures(_not_run(page), capsys)
    assert not failures, "\n".join(failures)
    if absent:
        pytest.skip("; ".join(absent))


@pytest.fixture
def workdir(tmp_path):
    """A reader's folder after `make train`: the arithmetic data `hybridrl data arithmetic` writes (its defaults,
    0.3 s), where the default config looks; `hybridrl` and `python` on PATH running this checkout."""
    write_dataset(str(tmp_path / "data" / "arithmetic"))
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    (bin_dir / "hybridrl").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hybridrl "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "COLUMNS": "120", "NO_COLOR": "1"}
    return tmp_path, env


def _run(cmd: list[str], cwd: Path, env: dict, block: Block) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: still running after {TIMEOUT_S} s; shorten it or mark it "
                    "<!-- not-run: REASON -->")


def _run_block(block: Block, cwd: Path, env: dict) -> None:
    if block.lang == "python":
        out = _run([sys.executable, "-c", block.code], cwd, env, block)
        assert out.returncode == 0, f"{block.where}: python exited {out.returncode}\n{out.stderr[-3000:]}"
    elif block.lang == "bash":
        out = _run(["bash", "-euo", "pipefail", "-c", block.code], cwd, env, block)
        assert out.returncode == 0, f"{block.where}: bash exited {out.returncode}\n{out.stdout[-2000:]}" \
                                    f"\n{out.stderr[-3000:]}"
    else:
        for command, expected in console_steps(block.code):
            out = _run(["bash", "-c", f"{command} 2>&1"], cwd, env, block)
            actual = out.stdout.split("\n")
            assert match_output(expected, actual), (f"{block.where}: `{command}` printed\n{out.stdout}\n"
                                                    "expected\n" + "\n".join(expected))


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _executed(p)], ids=_rel)
def test_page_commands_run(page, workdir):
    cwd, env = workdir
    for block in _executed(page):
        _run_block(block, cwd, env)


# The scheme itself, on pages written here (fast: no training)

PAGE = """# A page

```bash
echo run me
```

<!-- not-run: takes an hour on a GPU -->
```bash
hybridrl train data.train_batch_sise=3 \\
    trainer.total_training_steps=2   # a typo the plan check must catch
make train ARGS="trainer.total_training_steps=5 data.train_batch_size=64"
```

```
no language
```

<!-- not-run:  -->
```python
print(1)
```

<!-- not-run: output -->
```text
hybridrl train
```
"""


def test_the_scheme_flags_blocks_without_a_language_or_a_reason(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = blocks(page)
    assert [(b.line, b.lang, b.not_run) for b in found] == [(3, "bash", None), (8, "bash", "takes an hour on a GPU"),
                                                             (14, "", None), (19, "python", ""), (24, "text", "output")]
    assert [problem(b) is None for b in found] == [True, True, False, False, False]
    assert "page.md:14: a ``` block" in problem(found[2]) and "needs a reason" in problem(found[3])
    assert "drop its not-run marker" in problem(found[4])


def test_train_commands_are_read_from_continued_lines_and_make_args(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert train_overrides(blocks(page)[1].code) == [
        ["data.train_batch_sise=3", "trainer.total_training_steps=2"],
        ["trainer.total_training_steps=5", "data.train_batch_size=64"]]
    assert train_overrides("$ .venv/bin/hybridrl plan a=1 | tail -3\nhybridrl view runs/a") == [["a=1"]]


def test_the_plan_check_catches_a_bad_key_in_a_not_run_block(tmp_path, monkeypatch, capsys):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    monkeypatch.chdir(tmp_path)
    failures, absent = plan_failures([blocks(page)[1]], capsys)
    assert len(failures) == 1 and absent == []
    assert "page.md:8: hybridrl plan data.train_batch_sise=3" in failures[0]
    assert "did you mean 'data.train_batch_size'" in failures[0]


def test_console_output_matches_up_to_whitespace_with_ellipses():
    printed = ["batch plan:", "  32 prompts x 8", "memory: 1.2 GiB of 23 GiB", "done: 2 steps", ""]
    assert match_output(["batch plan: 32 prompts", "x 8", "...", "done: 2 steps"], printed)
    assert match_output(["...", "memory: 1.2 GiB", "...", "done:", "2 steps"], printed)
    assert not match_output(["batch plan:", "  32 prompts x 8", "done: 2 steps"], printed)  # a line left out
    assert not match_output(["...", "done: 3 steps"], printed)
    assert not match_output(["...", "memory: 1.2 GiB", "..."], ["memory: 1.2"])


def test_a_failing_block_names_its_file_and_line(tmp_path):
    block = Block(tmp_path / "p.md", 7, "bash", "echo partial; exit 3")
    with pytest.raises(AssertionError, match=r"p\.md:7: bash exited 3"):
        _run_block(block, tmp_path, {"PATH": os.environ["PATH"]})
    block = Block(tmp_path / "p.md", 9, "console", "$ echo hello\nhullo")
    with pytest.raises(AssertionError, match=r"p\.md:9: `echo hello` printed"):
        _run_block(block, tmp_path, {"PATH": os.environ["PATH"]})
