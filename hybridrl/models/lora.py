"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on the policy, with `peft`.

A LoRA layer computes W x + s B A x, with the base weight W [out, in] frozen, A [r, in] and
B [out, r] trained, and s = lora_alpha / r. What follows from that here:
- only A and B (and their AdamW moments) are trained and checkpointed: a checkpoint's actor/ is
  peft's adapter folder (adapter_config.json + adapter_model.safetensors);
- the reference policy is the policy's own module with its adapter switched off (`base_policy`):
  no second copy of the weights;
- an engine with its own weights (vllm) and `hybridrl export --merge-lora` get the plain model the
  adapter computes, W + s B A under the base's own parameter names (`plain_state_dict`).

`peft` is imported inside the functions that need it: runs without LoRA never import it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Iterator, Optional, Union

import torch
from torch import Tensor

from hybridrl.errors import ConfigError, HybridRLError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."  # peft's prefix on the wrapped model's parameter names
INSTALL = "pip install 'hybridrl[lora]' (the peft package)"


@dataclass(frozen=True)
class LoraSettings:
    """actor_rollout_ref.model.lora_* (verl's names)."""

    rank: int  # r, the adapter's inner dimension
    alpha: float  # the update is scaled by alpha / rank
    target_modules: Union[str, list[str]]  # "all-linear" (every Linear but the LM head) or module names
    exclude_modules: Union[str, list[str], None] = None  # module names (or a regex) never adapted
    adapter_path: Optional[str] = None  # start from this adapter folder instead of B = 0


def is_lora(module: torch.nn.Module) -> bool:
    """Whether `module` is a peft-wrapped model (LoRA on)."""
    return hasattr(module, "peft_config") and hasattr(module, "disable_adapter")


def apply_lora(module: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """`module` wrapped by peft with a trainable adapter; every base parameter frozen.

    Dropout on the adapter is 0: the rollout, the log-prob pass and the update must compute the
    same policy, or the PPO ratio is not 1 on-policy."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if settings.adapter_path is not None:
        return PeftModel.from_pretrained(module, settings.adapter_path, is_trainable=True)
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, target_modules=settings.target_modules,
                        exclude_modules=settings.exclude_modules, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    try:
        return get_peft_model(module, config)
    except ValueError as e:  # e.g. a target module name the model does not have
        raise ConfigError(f"actor_rollout_ref.model.target_modules={settings.target_modules!r}: peft cannot apply "
                          f"LoRA to this model ({str(e).splitlines()[0]})") from e


@contextlib.contextmanager
def base_policy(module: torch.nn.Module) -> Iterator[None]:
    """Inside the block `module` computes its base model (adapter off, eval mode): the reference policy."""
    was_training = module.training
    module.eval()
    try:
        with module.disable_adapter():
            yield
    finally:
        module.train(was_training)


def _lora_layers(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{name of the adapted layer in the base model: its peft LoRA layer}."""
    from peft.tuners.lora import LoraLayer

    base = module.get_base_model()
    return {name: layer for name, layer in base.named_modules() if isinstance(layer, LoraLayer)}


def delta_weight(layer, a: Tensor, b: Tensor, adapter: str = "default") -> Tensor:
    """s B A of one adapted layer, oriented like its base weight ([out, in]; transposed for
    fan_in_fan_out layers such as GPT-2's Conv1D)."""
    delta = (b.float() @ a.float()) * layer.scaling[adapter]  # [out, r] @ [r, in]
    return delta.T if layer.fan_in_fan_out else delta


def plain_state_dict(module: torch.nn.Module, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The weights of the plain model that `module` computes, from `state` (its full state dict,
    as Sharding.full_state_dict gives it). For a LoRA module: W + s B A under the base model's own
    names (`model.layers.0.self_attn.q_proj.weight`), adapter tensors dropped; `module` itself is
    not changed, so its base weights stay bit-identical (merging in place and back would round
    them). Any other module: `state` as it is."""
    if not is_lora(module):
        return state
    layers = _lora_layers(module)
    out: dict[str, Tensor] = {}
    for key, tensor in state.items():
        name = key.removeprefix(PREFIX)
        if ".lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = tensor
    for name, layer in layers.items():
        for adapter in layer.active_adapters:
            if adapter not in layer.lora_A:
                continue
            a, b = (state[f"{PREFIX}{name}.lora_{x}.{adapter}.weight"] for x in "AB")
            weight = out[f"{name}.weight"]
            out[f"{name}.weight"] = (weight.float() + delta_weight(layer, a, b, adapter)).to(weight.dtype)
    return out


def effective_weight(linear: torch.nn.Module) -> Tensor:
    """The weight a Linear multiplies by, a peft LoRA layer's active adapters added (W + s B A), for
    code that reads weights rather than calling the layer (rollout/decode.py)."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight
    weight = base.weight
    if linear.merged or linear.disable_adapters:
        return weight
    for adapter in linear.active_adapters:
        if adapter in linear.lora_A:
            a, b = linear.lora_A[adapter].weight, linear.lora_B[adapter].weight
            weight = weight + delta_weight(linear, a, b, adapter).to(weight.dtype)
    return weight


def load_adapter_weights(module: torch.nn.Module, folder: str) -> None:
    """An adapter folder's weights into the LoRA module the optimizer already holds (resume)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = os.path.join(folder, ADAPTER_WEIGHTS)
    if not os.path.isfile(path):
        raise HybridRLError(f"{folder} has no {ADAPTER_WEIGHTS}: it was not written by a LoRA run; resume with the "
                            "config that wrote it (actor_rollout_ref.model.lora_rank)")
    result = set_peft_model_state_dict(module, load_file(path))
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if result.unexpected_keys or missing:
        raise HybridRLError(f"{folder}'s adapter does not match the one being trained (unexpected "
                            f"{result.unexpected_keys[:3]}, missing {missing[:3]}); resume with the config that wrote it")


def is_adapter_folder(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, ADAPTER_CONFIG))


def adapter_config(folder: str) -> dict:
    """The adapter folder's adapter_config.json (rank `r`, `lora_alpha`, `base_model_name_or_path` ...)."""
    with open(os.path.join(folder, ADAPTER_CONFIG)) as f:
        return json.load(f)


def load_adapter_model(folder: str, dtype: torch.dtype = torch.float32):
    """A saved adapter on its base model (the base folder its adapter_config.json names), for inference."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = adapter_config(folder).get("base_model_name_or_path")
    if not base or not os.path.isdir(base):
        raise HybridRLError(f"{folder}/{ADAPTER_CONFIG} names the base model {base!r}, which is not a folder here; "
                            "put the base model there (or edit base_model_name_or_path)")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    return PeftModel.from_pretrained(model, folder).eval()
