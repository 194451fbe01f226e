"""`hybridrl model from-gguf`: input checks (nothing is written on bad input) and the plain copy
that makes a GGUF-loaded model saveable. The real conversion is tests/integration/test_smollm2.py."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch

from hybridrl import cli
from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models import gguf


def _fake_gguf(path, body: bytes = b"\x03\x00\x00\x00rest") -> str:
    with open(path, "wb") as f:
        f.write(gguf.GGUF_MAGIC + body)
    return str(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(HybridRLError, match="no such file"):
        gguf.check_source(str(tmp_path / "nope.gguf"), None)


def test_a_file_without_the_magic_is_refused(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 a zip, not a gguf")
    with pytest.raises(HybridRLError, match="not a GGUF file"):
        gguf.check_source(str(path), None)


def test_sha256_is_checked(tmp_path):
    path = _fake_gguf(tmp_path / "model.gguf")
    good = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert gguf.sha256_of(path) == good
    gguf.check_source(path, good.upper())  # hex case does not matter
    with pytest.raises(HybridRLError, match=f"expected {'0' * 64}"):
        gguf.check_source(path, "0" * 64)


def test_destination_must_be_new_or_empty(tmp_path):
    gguf.check_destination(str(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    gguf.check_destination(str(tmp_path / "empty"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text("{}")
    with pytest.raises(HybridRLError, match="not empty"):
        gguf.check_destination(str(tmp_path / "full"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(HybridRLError, match="not empty"):
        gguf.check_destination(str(tmp_path / "file"))


def test_missing_packages_name_the_extra(monkeypatch):
    monkeypatch.setattr(gguf, "_importable", lambda name: name != "accelerate")
    with pytest.raises(ConfigError, match=r"accelerate package\(s\): pip install 'hybridrl\[gguf\]'"):
        gguf._require_gguf_support()


def test_bad_input_writes_nothing(tmp_path):
    src = _fake_gguf(tmp_path / "model.gguf")
    out = tmp_path / "out"
    with pytest.raises(HybridRLError, match="sha256"):
        gguf.convert(src, str(out), sha256="f" * 64)
    with pytest.raises(HybridRLError, match="--dtype"):
        gguf.convert(src, str(out), dtype="int4")
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["model.gguf"]


def test_cli_reports_one_line_and_exit_2(tmp_path, capsys):
    code = cli.main(["model", "from-gguf", str(tmp_path / "missing.gguf"), str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("hybridrl model: error:") and "no such file" in err and "\n" not in err


def test_plain_copy_drops_the_quantization_config(random_model_dir, tmp_path):
    """A model whose config carries a quantization_config (as transformers' GGUF reader leaves it)
    becomes an ordinary one with the same weights and outputs."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(random_model_dir).eval()
    model.config.quantization_config = {"quant_method": "gguf", "gguf_file": "x.gguf", "dequantize": False}
    plain = gguf.plain_copy(model)
    assert not hasattr(plain.config, "quantization_config") or plain.config.quantization_config is None
    plain.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, model(ids).logits)
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))
