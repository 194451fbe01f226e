"""`import hybridrl` stays cheap (no torch, no transformers) and the public names load on first use."""

from __future__ import annotations

import os
import subprocess
import sys

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
    from hybridrl.api.evaluate import evaluate, load
    from hybridrl.api.train import Run, train
    from hybridrl.trainer.callbacks import Callback

    assert hybridrl.__all__ == ["Callback", "Run", "evaluate", "load", "train"]
    assert (hybridrl.train, hybridrl.Run, hybridrl.evaluate, hybridrl.load, hybridrl.Callback) == (
        train, Run, evaluate, load, Callback)
    assert set(hybridrl.__all__) <= set(dir(hybridrl))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'hybridrl' has no attribute 'trian'"):
        hybridrl.trian
