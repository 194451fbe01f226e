"""Registry: duplicate names, unknown lookups, sorted listings."""

from __future__ import annotations

import pytest

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.registry import Registry


def _fn_a():
    return "a"


def _fn_b():
    return "b"


def _make():
    reg: Registry = Registry("widget", "section.widget_kind")
    # registered out of order on purpose
    reg.register("gamma", "third")(_fn_b)
    reg.register("alpha", "first", flag=True)(_fn_a)
    reg.register("beta", "second")(_fn_b)
    return reg


def test_register_returns_function_and_get_finds_it():
    reg = _make()
    assert reg.get("alpha") is _fn_a
    assert reg.get("alpha")() == "a"
    assert reg.entry("alpha").doc == "first"
    assert reg.entry("alpha").meta == {"flag": True}
    assert reg.entry("beta").meta == {}
    assert "alpha" in reg and "delta" not in reg


def test_register_twice_raises_value_error_and_keeps_first():
    reg = _make()
    with pytest.raises(ValueError) as info:
        reg.register("alpha", "again")(_fn_b)
    assert "'alpha'" in str(info.value)
    assert "widget" in str(info.value)
    assert reg.get("alpha") is _fn_a  # the first registration survives
    assert reg.entry("alpha").doc == "first"


def test_real_registry_rejects_duplicates():
    with pytest.raises(ValueError):
        ADV_ESTIMATORS.register("grpo", "duplicate")(lambda inputs, params: None)
    assert ADV_ESTIMATORS.get("grpo").__name__ == "grpo"


@pytest.mark.parametrize("lookup", ["get", "entry"])
def test_unknown_name_raises_config_error(lookup):
    reg = _make()
    with pytest.raises(ConfigError) as info:
        getattr(reg, lookup)("delta")
    msg = str(info.value)
    assert "section.widget_kind='delta'" in msg
    assert "widget" in msg
    assert "valid values: alpha, beta, gamma" in msg
    assert isinstance(info.value, HybridRLError)


def test_names_and_entries_sorted():
    reg = _make()
    assert reg.names() == ["alpha", "beta", "gamma"]
    assert [e.name for e in reg.entries()] == ["alpha", "beta", "gamma"]
    assert [e.doc for e in reg.entries()] == ["first", "second", "third"]


def test_empty_registry():
    reg: Registry = Registry("thing", "a.b")
    assert reg.names() == []
    with pytest.raises(ConfigError) as info:
        reg.get("x")
    assert "a.b='x'" in str(info.value)
