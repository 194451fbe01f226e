"""config/yaml_load: `1e-5` in a config or sweep file is the number a user wrote, not the string PyYAML makes of
it; everything else reads as yaml.safe_load reads it."""

from __future__ import annotations

import math

import pytest
import yaml

from hybridrl.config.yaml_load import safe_load


@pytest.mark.parametrize("text, value", [
    ("1e-5", 1e-5), ("1E-5", 1e-5), ("-3e-6", -3e-6), ("+2e3", 2000.0), ("1.0e5", 100000.0), ("2_000e-3", 2.0),
])
def test_exponent_forms_that_yaml_1_1_leaves_as_text_are_floats(text, value):
    assert yaml.safe_load(f"x: {text}")["x"] == text  # PyYAML alone: the string
    got = safe_load(f"x: {text}")["x"]
    assert isinstance(got, float) and math.isclose(got, value)


@pytest.mark.parametrize("text", ["10", "-7", "0.5", "1.5e-3", ".inf", "true", "null", "1e", "e5", "1e-5x", "v1e5",
                                  "'1e-5'", "2026-11-28", "[1e-5, 3]", "{a: 1e-5}"])
def test_everything_else_reads_as_pyyaml_reads_it(text):
    expected = yaml.safe_load(f"x: {text}")["x"]
    got = safe_load(f"x: {text}")["x"]
    if text.startswith("["):
        assert got == [1e-5, 3]  # inside a list too
    elif text.startswith("{"):
        assert got == {"a": 1e-5}
    else:
        assert got == expected and type(got) is type(expected), text


def test_a_sweep_range_and_a_config_file_written_with_1e_5(tmp_path):
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.sweep.spec import load_sweep

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: {overrides: {}}\nspace:\n  actor_rollout_ref.actor.optim.lr: {loguniform: [1e-5, 1e-3]}\n"
                     "metric: val-core/arithmetic/reward/mean@1\nmode: max\nnum_samples: 2\n"
                     f"output: {tmp_path / 'out'}\n")
    spec = load_sweep(str(sweep))
    assert [(e.kind, e.values) for e in spec.space] == [("loguniform", (1e-5, 1e-3))]
    config = tmp_path / "run.yaml"
    config.write_text("actor_rollout_ref:\n  actor:\n    optim:\n      lr: 3e-6\n")
    assert load_config(RLConfig, str(config), []).actor_rollout_ref.actor.optim.lr == 3e-6


@pytest.mark.parametrize("make, says", [
    (lambda d: d, "a folder, not a file"),
    (lambda d: d / "missing.yaml", "no such file"),
    (lambda d: _write(d / "bad.yaml", b"space: {a: [1,\n"), "not valid YAML (while parsing a flow node"),
    (lambda d: _write(d / "bad2.yaml", b"a: 1\n  b: 2\n"), "not valid YAML (mapping values are not allowed here in "
                                                          '"{tmp_path}/bad2.yaml", line 2, column 4'),
    (lambda d: _write(d / "latin1.yaml", b"metric: caf\xe9\n"), "not UTF-8 text (byte 0xe9 at offset 11)"),
    (lambda d: _write(d / "binary.yaml", b"\x7fELF\x02\x01\x01\x00\xf0\x9f"), "not UTF-8 text (byte 0xf0 at offset 8)"),
])
def test_a_file_that_cannot_be_read_is_one_line_for_a_config_and_a_sweep_file(tmp_path, make, says):
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.errors import ConfigError
    from hybridrl.sweep.spec import load_sweep

    path, says = str(make(tmp_path)), says.format(tmp_path=tmp_path)  # a YAML error names the file, not a string
    with pytest.raises(ConfigError) as config_error:
        load_config(RLConfig, path, [])
    with pytest.raises(ConfigError) as sweep_error:
        load_sweep(path)  # a traceback before (UnicodeDecodeError), and a folder was 'not found'
    for e, label in ((config_error, f"--config {path}"), (sweep_error, path)):
        assert str(e.value).startswith(f"{label}: {says}") and "\n" not in str(e.value)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path
