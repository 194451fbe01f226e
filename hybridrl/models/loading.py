"""Load HuggingFace causal LMs and tokenizers from local folders or bundled models."""

from __future__ import annotations

import contextlib
import glob
import os
from pathlib import Path
from typing import Iterator

import torch
from safetensors import SafetensorError

from hybridrl.errors import ConfigError, HybridRLError, setting

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BUNDLED = {"tiny-arith": ASSETS / "tiny-arith"}  # name -> folder shipped in the package


def resolve_model_path(path: str, key: str = "actor_rollout_ref.model.path") -> str:
    """A bundled model's folder, or the path itself if it is a folder."""
    if path in BUNDLED:
        return str(BUNDLED[path])
    if os.path.isdir(path):
        if not any(os.path.isfile(os.path.join(path, f)) for f in ("config.json", "adapter_config.json")):
            raise ConfigError(f"{key}={path!r} is a folder without a config.json, not a HuggingFace model folder; give "
                              "the folder save_pretrained wrote (config.json, *.safetensors, tokenizer files)")
        return path
    raise ConfigError(
        f"{key}={path!r} is neither a model folder nor a bundled model ({', '.join(BUNDLED)}); "
        "give a local HuggingFace folder (nothing is downloaded)"
    )


def weights_bytes(folder: str) -> int:
    """Bytes of a model folder's safetensors files."""
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))


@contextlib.contextmanager
def readable(path: str, name: str | None = None) -> Iterator[None]:
    """A model folder that cannot be loaded is a one-line error, not a library traceback: damaged weights
    (a safetensors header that does not parse) name the folder and the damage; a folder transformers cannot
    read (a config.json without model_type or not JSON, missing tokenizer or weight files, an unknown
    architecture) names the setting it came from (`name`: a config key, or a word such as "model")."""
    try:
        yield
    except SafetensorError as e:
        raise readable_error(path, e) from None
    except (OSError, ValueError) as e:
        if name is None:
            raise readable_error(path, e) from None
        reason = " ".join(str(e).split())[:300]
        raise ConfigError(f"{setting(name, path)}: cannot load it as a HuggingFace model ({reason}); give a complete "
                          "model folder (what save_pretrained writes)") from None


def readable_error(folder: str, e: Exception) -> HybridRLError:
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return HybridRLError(f"cannot load the model in {folder} ({type(e).__name__}: {first}); its files are damaged or "
                         "it is not a HuggingFace model folder")


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

    with readable(path, "tokenizer"):
        tok = AutoTokenizer.from_pretrained(resolve_model_path(path))
    if tok.pad_token_id is None:  # many base models ship without one; padding is always masked out
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        raise ConfigError(f"the tokenizer in {path} has no chat template; prompts are chat messages and need one")
    return tok


def load_causal_lm(path: str, device: str = "cpu", dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    with readable(path, "model"), quiet_loading():
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
    except (OSError, SafetensorError) as e:  # damaged or missing files
        raise readable_error(folder, e) from None
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
    with readable(path, key):
        config = AutoConfig.from_pretrained(folder)
    archs = config.architectures or []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ConfigError(f"{key}={path!r} is a {', '.join(archs) or 'model without architectures'} checkpoint, not a "
                          "trained *ForSequenceClassification reward model; its score head would be random")
    if config.num_labels != 1:
        raise ConfigError(f"{key}={path!r} has {config.num_labels} labels; a reward model outputs one scalar (num_labels=1)")
    with readable(folder), quiet_loading():
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=dtype)
    if not isinstance(getattr(model, "score", None), torch.nn.Module):
        raise ConfigError(f"{key}={path!r}: {archs[0]} has no `score` head; use a decoder reward model "
                          "(Llama, Qwen2, Mistral, GPT-2 ... *ForSequenceClassification)")
    return model.to(device).eval().requires_grad_(False)


def reward_model_to_train(path: str, tokenizer, key: str = "model.partial_pretrain", dtype: torch.dtype = torch.float32):
    """A *ForSequenceClassification model with one output to train as a reward model: a causal LM's backbone
    with a fresh `score` head (transformers initialises it; seed torch first), or an existing one-output reward
    model whose head is kept. Its config gets the tokenizer's pad_token_id, which HF's own pooling and
    `reward_model.model.path` loading need. A tokenizer with more ids than the embedding table is refused:
    it belongs to another model."""
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    folder = resolve_model_path(path, key)
    with readable(path, key):
        config = AutoConfig.from_pretrained(folder)
    if any(a.endswith("ForSequenceClassification") for a in config.architectures or []) and config.num_labels != 1:
        raise ConfigError(f"{key}={path!r} is a classifier with {config.num_labels} labels; a reward model outputs "
                          "one scalar: start from its causal LM, or from a one-label reward model")
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "newly initialized: score.weight" is the point when starting from a causal LM
    try:
        with quiet_loading():
            model = AutoModelForSequenceClassification.from_pretrained(folder, config=config, dtype=dtype)
    except ValueError as e:  # an architecture without a sequence-classification class
        raise ConfigError(f"{key}={path!r}: cannot build a reward model from it ({' '.join(str(e).split())[:200]})") from e
    except (OSError, SafetensorError) as e:
        raise readable_error(folder, e) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if not isinstance(getattr(model, "score", None), torch.nn.Module):  # workers/reward_model.py reads `score`
        raise ConfigError(f"{key}={path!r}: {type(model).__name__} has no `score` head; use a decoder model "
                          "(Llama, Qwen2, Mistral, GPT-2 ...)")
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ConfigError(f"{key}={path!r}: its tokenizer has {len(tokenizer)} tokens but the model's embedding table "
                          f"has {rows} rows; the tokenizer files belong to another model: give a folder whose tokenizer "
                          "matches its weights")
    return model


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
