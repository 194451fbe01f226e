"""A shrunk twin of a model folder, for `hybridrl check`: the folder's own architecture (config.json's
model_type and options), tokenizer, chat template and vocabulary, with a few layers and a small width,
randomly initialised. Nothing is downloaded; the real weights are never read.

What the twin keeps is what the check's verdicts depend on (token ids, the chat template, the model
class's forward, cache and generation code, tied embeddings, the vocabulary's size); what it changes is
only the size (depth, width, heads, experts), so a step takes seconds on a CPU.
"""

from __future__ import annotations

import json
import os
import shutil

from hybridrl.errors import HybridRLError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
LAYERS = 2
WIDTH = 64
# 2 heads of 32: vLLM's CPU attention runs head sizes 32, 64, 80, ... only (4 heads of 16 killed its engine:
# "Unsupported CPU attention configuration: head_dim=16"), and a check must run the configured engine
HEADS = 2


class TwinError(HybridRLError):
    """The model folder lacks what a twin is made from."""


def missing_for_twin(folder: str) -> list[str]:
    """What the check needs from a model folder and does not find there (empty: a twin can be made)."""
    if not os.path.isdir(folder):
        return [f"the folder itself ({folder} does not exist)"]
    missing = []
    if not os.path.isfile(os.path.join(folder, "config.json")):
        missing.append("config.json")
    if not any(os.path.isfile(os.path.join(folder, f)) for f in TOKENIZER_FILES):
        missing.append(f"the tokenizer files (one of {', '.join(TOKENIZER_FILES)}, with tokenizer_config.json)")
    return missing


def require_twin_source(folder: str) -> None:
    """A TwinError, in one line, when `folder` lacks what a twin is made from (missing_for_twin)."""
    missing = missing_for_twin(folder)
    if missing:
        raise TwinError(f"{folder}: a shrunk twin of the model needs its folder's config.json and tokenizer files; "
                        f"missing: {'; '.join(missing)}. Give the folder save_pretrained wrote (the weights are not "
                        "read)")


def shrunk_config(config, layers: int = LAYERS, width: int = WIDTH, heads: int = HEADS):
    """A copy of a transformers config at twin size: `layers` decoder layers, hidden size `width`, `heads`
    query heads (the key/value heads keep the real model's grouping where they divide), the MLP 2x wide,
    at most 4 experts of which 2 routed. Every other option (vocabulary, tied embeddings, rope, sliding
    windows, norms, activation) is the real model's."""
    c = config.__class__.from_dict(config.to_dict())
    text = getattr(c, "text_config", None) or c  # multimodal configs keep the language model's options there
    real_heads = getattr(text, "num_attention_heads", heads) or heads
    real_kv = getattr(text, "num_key_value_heads", None) or real_heads
    group = max(1, real_heads // real_kv)  # queries per key/value head in the real model
    heads = max(1, min(heads, real_heads))
    kv = max(1, heads // group) if heads % max(1, heads // group) == 0 else heads
    layers = max(1, min(layers, getattr(text, "num_hidden_layers", layers)))
    updates = {"num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": heads,
               "num_key_value_heads": kv, "head_dim": width // heads, "intermediate_size": 2 * width}
    for key, value in updates.items():
        if hasattr(text, key) or key in ("num_hidden_layers", "hidden_size"):
            setattr(text, key, value)
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if getattr(text, key, None):
            setattr(text, key, min(4, getattr(text, key)))
    for key in ("num_experts_per_tok", "moe_topk"):
        if getattr(text, key, None):
            setattr(text, key, min(2, getattr(text, key)))
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if getattr(text, key, None):
            setattr(text, key, 2 * width)
    if isinstance(getattr(text, "layer_types", None), list):  # per-layer kinds (sliding / full attention)
        text.layer_types = text.layer_types[:layers]
    if getattr(text, "max_window_layers", None):
        text.max_window_layers = min(text.max_window_layers, layers)
    return c


def build_twin(folder: str, out: str, seed: int = 0, layers: int = LAYERS, width: int = WIDTH,
               head: str = "causal_lm") -> str:
    """Write the twin of model folder `folder` into `out` (created; returned) and return `out`.

    `head`: "causal_lm" (a policy), "token_value" (a critic: the backbone with a scalar per token) or
    "sequence_score" (a reward model, *ForSequenceClassification with one label). The tokenizer and chat
    template files are copied byte for byte, so the twin tokenizes exactly as the real model does."""
    import torch
    from transformers import AutoConfig

    require_twin_source(folder)
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as e:
        raise TwinError(f"{folder}/config.json: transformers cannot read it ({' '.join(str(e).split())[:200]}); "
                        "give a HuggingFace model folder") from None
    small = shrunk_config(config, layers, width)
    if head != "causal_lm":
        small.num_labels = 1
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(folder):  # tokenizer, chat template, generation config: as they are
        src = os.path.join(folder, name)
        if (os.path.isfile(src) and name != "config.json" and not name.endswith(WEIGHT_SUFFIXES)
                and not name.endswith(".index.json")):
            shutil.copyfile(src, os.path.join(out, name))
    torch.manual_seed(seed)
    from hybridrl.models.loading import quiet_loading

    model = _auto_class(head).from_config(small, dtype=torch.float32)
    with quiet_loading():  # transformers' "Writing model shards" bar
        model.save_pretrained(out)
    with open(os.path.join(out, "twin.json"), "w") as f:  # what it is a twin of, for reports
        json.dump({"of": os.path.abspath(folder), "layers": small.num_hidden_layers, "width": width,
                   "head": head, "seed": seed}, f)
    return out


def _auto_class(head: str):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoModelForTokenClassification

    classes = {"causal_lm": AutoModelForCausalLM, "token_value": AutoModelForTokenClassification,
               "sequence_score": AutoModelForSequenceClassification}
    if head not in classes:
        raise ValueError(f"head {head!r}: one of {', '.join(classes)}")
    return classes[head]
