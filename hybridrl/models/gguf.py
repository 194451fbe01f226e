"""`hybridrl model from-gguf`: a GGUF file (llama.cpp's format) -> a plain HuggingFace folder.

transformers reads GGUF (with the `gguf` and `accelerate` packages) and dequantizes every tensor
to the dtype asked for, but a model loaded that way keeps a `quantization_config` and refuses
`save_pretrained`. So the dequantized weights go into a fresh model built from the same config
without it, which saves as ordinary safetensors. The folder is written next to its destination
and renamed into place only once it has been reloaded and checked, so a failure leaves nothing
half-written. Dequantized 4-bit weights are an approximation of the published model's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch

from hybridrl.errors import ConfigError, HybridRLError

GGUF_MAGIC = b"GGUF"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CHECK_MESSAGES = [{"role": "user", "content": "What is 2+3?"}]  # the prompt the reloaded folder is checked on


@dataclass(frozen=True)
class Converted:
    out_dir: str
    architecture: str  # e.g. LlamaForCausalLM
    parameters: int
    max_logit_diff: float  # |logits of the reloaded folder - logits of the GGUF-loaded model|, max over the check prompt


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_source(gguf_file: str, sha256: str | None) -> None:
    """The file exists, starts with the GGUF magic and (when given) has the expected sha256."""
    if not os.path.isfile(gguf_file):
        raise HybridRLError(f"{gguf_file}: no such file; give the path of a .gguf model file")
    with open(gguf_file, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise HybridRLError(f"{gguf_file} is not a GGUF file (it does not start with b'GGUF')")
    if sha256 is not None:
        actual = sha256_of(gguf_file)
        if actual != sha256.lower():
            raise HybridRLError(f"{gguf_file}: sha256 is {actual}, expected {sha256.lower()}; the file is corrupt or "
                                "not the one asked for (delete it and fetch it again)")


def check_destination(out_dir: str) -> None:
    """Never write over an existing model: the destination must be absent or an empty folder."""
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise HybridRLError(f"{out_dir} already exists and is not empty; choose a new output folder or remove it")


def _require_gguf_support() -> None:
    missing = [name for name in ("gguf", "accelerate") if not _importable(name)]
    if missing:
        raise ConfigError(f"reading GGUF files needs the {' and '.join(missing)} package(s): "
                          "pip install 'hybridrl[gguf]' (or `make smollm2`, which installs them)")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def load_gguf(gguf_file: str, dtype: torch.dtype):
    """(model, tokenizer) dequantized by transformers; the model still carries its quantization_config."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hybridrl.models.loading import quiet_loading

    folder, name = os.path.split(os.path.abspath(gguf_file))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        with quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
    except (ValueError, KeyError, NotImplementedError) as e:  # an architecture or quant type transformers lacks
        raise HybridRLError(f"{gguf_file}: transformers cannot convert it ({e})") from e
    return model.eval(), tokenizer


def plain_copy(model):
    """The same weights in a model whose config has no quantization_config (so it saves)."""
    from transformers import AutoModelForCausalLM

    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    plain = AutoModelForCausalLM.from_config(type(model.config).from_dict(config), dtype=model.dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = model.generation_config
    return plain.eval()


@torch.no_grad()
def _check_logits(original, folder: str, tokenizer) -> float:
    """Reload `folder` as any user would and compare its logits with the GGUF-loaded model's."""
    from transformers import AutoModelForCausalLM

    from hybridrl.models.loading import quiet_loading

    ids = tokenizer.apply_chat_template(CHECK_MESSAGES, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    with quiet_loading():
        reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=original.dtype).eval()
    return float((reloaded(ids).logits.float() - original(ids).logits.float()).abs().max())


def convert(gguf_file: str, out_dir: str, dtype: str = "float32", sha256: str | None = None,
            tolerance: float = 1e-4) -> Converted:
    """Write `gguf_file` as a HuggingFace folder (safetensors, config, generation config, tokenizer
    with its chat template) at `out_dir`, loadable offline with AutoModelForCausalLM/AutoTokenizer."""
    if dtype not in DTYPES:
        raise HybridRLError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    check_source(gguf_file, sha256)
    check_destination(out_dir)
    _require_gguf_support()
    model, tokenizer = load_gguf(gguf_file, DTYPES[dtype])
    if not tokenizer.chat_template:
        raise HybridRLError(f"{gguf_file} has no chat template (tokenizer.chat_template); hybridrl's prompts are chat "
                            "messages, so an instruct model's GGUF is needed")
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".from-gguf-", dir=parent)  # same filesystem: the final rename is atomic
    os.chmod(staging, 0o755)  # mkdtemp's folder is private; the model folder is an ordinary one
    try:
        plain_copy(model).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        diff = _check_logits(model, staging, tokenizer)
        if not diff <= tolerance:
            raise HybridRLError(f"the saved folder's logits differ from the GGUF model's by {diff:g} (> {tolerance:g})")
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Converted(out_dir, type(model).__name__, sum(p.numel() for p in model.parameters()), diff)
