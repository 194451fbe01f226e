"""The test tree itself: pytest's default import mode (rootdir-less, no __init__.py)
imports every test module by its basename, so two files with one name in different
folders make collection fail on a clean clone (a stale __pycache__ hides it locally)."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique():
    seen = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
