"""The `environment` check: the running torch, transformers and (for a vllm config) vLLM inside the tested window;
seeded: a version outside it, vLLM missing for a vllm config."""

import pytest

from hybridrl import versions
from hybridrl.check.context import CheckContext
from hybridrl.check.environment import environment
from hybridrl.check.result import FAIL, NA, PASS

WINDOWS = {"torch": {"low": "2.13.0", "high": "2.13.0"}, "transformers": {"low": "5.19.0", "high": "5.24.0"},
           "vllm": {"low": "0.32.0", "high": "0.32.0"}}
TESTED = {"torch": "2.13.0+cpu", "transformers": "5.24.1", "vllm": "0.32.0"}


@pytest.fixture
def installed(monkeypatch):
    """Pin the tested window and set the installed versions: `installed(**{package: version or None})`."""
    monkeypatch.setattr(versions, "tested_windows", lambda path=None: WINDOWS)

    def pin(**changes):
        monkeypatch.setattr(versions, "installed_versions", lambda: {**TESTED, **changes})

    return pin


def run(tmp_path, *overrides: str):
    return environment(CheckContext(None, list(overrides), str(tmp_path)))


def test_passes_inside_the_window(tmp_path, installed):
    installed()
    r = run(tmp_path)
    assert r.status == PASS and r.summary == "torch 2.13.0+cpu, transformers 5.24.1: inside the tested window"
    assert "vllm 0.32.0 (tested: 0.32.x) (not used: actor_rollout_ref.rollout.name=hf)" in r.details


def test_fails_on_an_untested_transformers(tmp_path, installed):
    """Seeded: transformers 6.0 where the suite passed on 5.19 to 5.24."""
    installed(transformers="6.0.0")
    r = run(tmp_path)
    assert r.status == FAIL and r.summary.startswith("transformers 6.0.0 is outside the versions")
    assert "pip install 'transformers>=5.19.0,<5.25'" in r.fix


def test_vllm_counts_only_when_the_config_generates_with_it(tmp_path, installed):
    installed(vllm="0.40.0")
    assert run(tmp_path).status == PASS
    r = run(tmp_path, "actor_rollout_ref.rollout.name=vllm")
    assert r.status == FAIL and r.summary.startswith("vllm 0.40.0 is outside")


def test_fails_when_a_vllm_config_has_no_vllm(tmp_path, installed):
    installed(vllm=None)
    r = run(tmp_path, "actor_rollout_ref.rollout.name=vllm")
    assert r.status == FAIL and "vLLM is not installed" in r.summary
    assert "make vllm" in r.fix and "actor_rollout_ref.rollout.name=hf" in r.fix


def test_not_applicable_without_a_recorded_window(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "tested_windows", lambda path=None: {})
    assert run(tmp_path).status == NA
