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


@pytest.mark.parametrize("page", [p for p in PAGES if _not_run(p)], ids=_rel)
def test_not_run_train_commands_pass_plan(page, monkeypatch, capsys):
    """`hybridrl plan` (in-process: config checks, placement, memory; no model weights, no training) accepts
    each train command of a not-run block, from the repository root (where its --config files are)."""
    from hybridrl.cli import main

    monkeypatch.chdir(REPO)
    failures, absent = [], []
    for block in _not_run(page):
        for args in train_overrides(block.code):
            missing = [a.split("=", 1)[1] for a in args if a.split("=", 1)[-1].startswith("models/")
                       and not (REPO / a.split("=", 1)[1]).exists()]
            if missing:  # an optional model (`make smollm2`) this checkout lacks; CI has it
                absent.append(f"{block.where}: {missing[0]} absent")
                continue
            if main(["plan", *args]) != 0:
                failures.append(f"{block.where}: hybridrl plan {' '.join(args)}\n{capsys.readouterr().err}")
            capsys.readouterr()
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
