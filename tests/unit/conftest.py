"""Fixtures of the config tests."""

import importlib.util

import pytest


@pytest.fixture
def vllm_installed(monkeypatch):
    """Validation only asks whether vLLM is installed (rollout.name=vllm): these tests are about the keys, so they
    run the same with and without it (`make test` installs no vLLM; CI's `make vllm` does)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "vllm" else real(n, *a))
