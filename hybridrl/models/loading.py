"""Load HuggingFace causal LMs and tokenizers from local folders or bundled models."""

from __future__ import annotations

import contextlib
import glob
import os
from pathlib import Path
from typing import Iterator

import torch

from hybridrl.errors import ConfigError, HybridRLError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BUNDLED = {"tiny-arith": ASSETS / "tiny-arith"}  # name -> folder shipped in the package


def resolve_model_path(path: str, key: str = "actor_rollout_ref.model.path") -> str:
    """A bundled model's folder, or the path itself if it is a folder."""
    if path in BUNDLED:
        return str(BUNDLED[path])
    if os.path.isdir(path):
        return path
    raise ConfigError(
        f"{key}={path!r} is neither a model folder nor a bundled model ({', '.join(BUNDLED)}); "
        "give a local HuggingFace folder (nothing is downloaded)"
    )


def weights_bytes(folder: str) -> int:
    """Bytes of a model folder's safetensors files."""
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' own progress bars ("Loading weights") off while a model loads: they repeat on every
    load, land in logs as carriage-return lines, and hybridrl shows what phase runs itself (progress.py)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path(path))
    if tok.pad_token_id is None:  # many base models ship without one; padding is always masked out
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        raise ConfigError(f"the tokenizer in {path} has no chat template; prompts are chat messages and need one")
    return tok


def load_causal_lm(path: str, device: str = "cpu", dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=dtype)
    return model.to(device)


def load_value_model(path: str, key: str, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A causal LM's backbone with a new scalar head (HF's *ForTokenClassification, num_labels=1).

    The head is freshly initialized (transformers reports it as newly initialized weights);
    dropout is off because values regress onto returns and dropout noise would bias them.
    """
    from transformers import AutoConfig, AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    folder = resolve_model_path(path, key)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the "newly initialized: score.weight" notice is expected here
    try:
        config = AutoConfig.from_pretrained(folder, num_labels=1)
        config.classifier_dropout = 0.0
        with quiet_loading():
            model = AutoModelForTokenClassification.from_pretrained(folder, config=config, dtype=dtype)
    except ValueError as e:  # an architecture without a token-classification class
        raise ConfigError(f"{key}={path!r}: cannot build a value model from it ({e})") from e
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.to(device)


def load_reward_model(path: str, key: str = "reward_model.model.path", device: str = "cpu",
                      dtype: torch.dtype = torch.float32):
    """A trained HF *ForSequenceClassification reward model with one output.

    A checkpoint of another kind (a plain causal LM) is refused: transformers would give it a
    random `score` head and the run would train on noise."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    folder = resolve_model_path(path, key)
    config = AutoConfig.from_pretrained(folder)
    archs = config.architectures or []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ConfigError(f"{key}={path!r} is a {', '.join(archs) or 'model without architectures'} checkpoint, not a "
                          "trained *ForSequenceClassification reward model; its score head would be random")
    if config.num_labels != 1:
        raise ConfigError(f"{key}={path!r} has {config.num_labels} labels; a reward model outputs one scalar (num_labels=1)")
    with quiet_loading():
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=dtype)
    if not isinstance(getattr(model, "score", None), torch.nn.Module):
        raise ConfigError(f"{key}={path!r}: {archs[0]} has no `score` head; use a decoder reward model "
                          "(Llama, Qwen2, Mistral, GPT-2 ... *ForSequenceClassification)")
    return model.to(device).eval().requires_grad_(False)


def eos_token_ids(model, tokenizer) -> list[int]:
    """Tokens that end a response: the generation config's EOS ids plus the tokenizer's."""
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def check_context_length(model, max_prompt_length: int, max_response_length: int,
                         keys: str = "data.max_prompt_length + data.max_response_length") -> None:
    """`keys` names the two settings in the error (config keys, or a command's flags)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max_prompt_length + max_response_length > limit:
        raise ConfigError(
            f"{keys} = {max_prompt_length} + {max_response_length} "
            f"exceeds the model's max_position_embeddings={limit}; lower one of them"
        )


def load_weights_into(module: torch.nn.Module, folder: str, load=None) -> None:
    """Load a save_pretrained folder's safetensors into an existing module (so the optimizer keeps
    its parameters); only weights tied to a loaded one (lm_head = embeddings) may be absent.
    `load(module, state) -> (missing, unexpected)` loads full tensors (default: load_state_dict;
    a sharded module passes its strategy's)."""
    from safetensors.torch import load_file

    state = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        state.update(load_file(path))
    load = load or (lambda m, s: m.load_state_dict(s, strict=False))
    missing, unexpected = load(module, state)
    tensors = {**dict(module.named_parameters(remove_duplicate=False)), **dict(module.named_buffers(remove_duplicate=False))}
    loaded = {id(tensors[k]) for k in state if k in tensors}
    untied = [k for k in missing if id(tensors.get(k)) not in loaded]
    if untied or unexpected:
        raise HybridRLError(f"{folder} does not match the model being trained (missing {untied[:3]}, unexpected "
                            f"{list(unexpected)[:3]}); resume with the config that wrote it")
