"""`import hybridrl` stays cheap (no torch, no transformers) and the public names load on first use."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hybridrl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_importing_the_package_imports_no_heavy_library():
    code = ("import sys, hybridrl; heavy = [m for m in ('torch', 'transformers', 'ray', 'pyarrow') if m in sys.modules];"
            " print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_public_names_are_the_api_modules_objects():
    from hybridrl.api.evaluate import evaluate
    from hybridrl.api.run import Run, load
    from hybridrl.api.train import train
    from hybridrl.trainer.callbacks import Callback

    assert hybridrl.__all__ == ["Callback", "Run", "evaluate", "load", "train"]
    assert (hybridrl.train, hybridrl.Run, hybridrl.evaluate, hybridrl.load, hybridrl.Callback) == (
        train, Run, evaluate, load, Callback)
    assert set(hybridrl.__all__) <= set(dir(hybridrl))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'hybridrl' has no attribute 'trian'"):
        hybridrl.trian


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    tree = ast.parse(path.read_text())
    return ({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names})


def test_the_api_modules_import_no_module_that_imports_them_back():
    """run.py at the bottom (Run, load); train.py and evaluate.py above it, neither importing the other."""
    api = Path(hybridrl.__file__).parent / "api"
    assert not {m for m in imported_modules(api / "run.py") if m.startswith("hybridrl.api")}
    for top, other in (("train.py", "hybridrl.api.evaluate"), ("evaluate.py", "hybridrl.api.train")):
        assert other not in imported_modules(api / top), top
    for low in ("data.py", "rewards.py"):
        assert not {m for m in imported_modules(api / low) if m.startswith("hybridrl.api")}, low


def test_evaluate_refuses_an_unknown_setting_listing_the_valid_ones():
    from hybridrl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"hybridrl.evaluate: unknown setting\(s\) temprature; valid: batch_size, "):
        hybridrl.evaluate("tiny-arith", [{"prompt": "q", "data_source": "arithmetic"}], temprature=0.5)
