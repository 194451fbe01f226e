"""The docs site builds with `mkdocs build --strict` (what `make docs` and CI run), and strict mode really fails on
a dead link and on a page missing from the nav; the built pages load no asset from the internet; README's links
(read on GitHub, outside the site) point at files that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="mkdocs is in hybridrl[test] (requirements/base.lock): make install")
pytest.importorskip("material", reason="mkdocs-material is in hybridrl[test] (requirements/base.lock): make install")

REPO = Path(__file__).resolve().parents[2]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=120,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture
def docs_copy(tmp_path) -> Path:
    """mkdocs.yml and docs/ copied, to break on purpose."""
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    return tmp_path


def test_the_site_builds_strict_and_loads_nothing_from_the_internet(tmp_path):
    out = build(REPO, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    pages = list((tmp_path / "site").rglob("*.html"))
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file() and len(pages) > 30
    remote = re.compile(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//[^\"]*\"")
    fetched = {m for p in pages for m in remote.findall(p.read_text())}
    assert not fetched, f"the site loads assets from the internet: {sorted(fetched)[:5]}"


def test_strict_fails_on_a_dead_link(docs_copy, tmp_path):
    page = docs_copy / "docs" / "data.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no_such_page.md).\n")
    out = build(docs_copy, tmp_path / "site")
    assert out.returncode != 0
    assert "no_such_page.md" in out.stderr and "not found among documentation files" in out.stderr


def test_strict_fails_on_a_page_missing_from_the_nav(docs_copy, tmp_path):
    (docs_copy / "docs" / "orphan.md").write_text("# Orphan\n")
    out = build(docs_copy, tmp_path / "site")
    assert out.returncode != 0
    assert "orphan.md" in out.stderr and "not included in the \"nav\"" in out.stderr


def test_readme_links_point_at_files_in_the_repository():
    text = (REPO / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)
               if not re.match(r"(https?:|#|mailto:)", t)]
    assert targets, "README links nothing"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_nothing_user_facing_points_outside_the_repository():
    """No `../shared` (a path beside this checkout) in the README, the docs, the examples or the package."""
    files = [REPO / "README.md", REPO / "mkdocs.yml", *(REPO / "docs").rglob("*.md"),
             *(REPO / "examples").rglob("*"), *(REPO / "hybridrl").rglob("*.py")]
    hits = [str(f.relative_to(REPO)) for f in files if f.is_file() and f.suffix in (".md", ".py", ".sh", ".yaml", ".yml")
            and "../shared" in f.read_text()]
    assert not hits, f"paths outside the repository in: {hits}"
