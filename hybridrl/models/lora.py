"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on the policy and on
the critic (PPO's value model), with `peft`.

A LoRA layer computes W x + s B A x, with the base weight W [out, in] frozen, A [r, in] and
B [out, r] trained, and s = lora_alpha / r. What follows from that here:
- only A and B (and their AdamW moments) are trained and checkpointed: a checkpoint's actor/ is
  peft's adapter folder (adapter_config.json + adapter_model.safetensors);
- the value model's scalar head is new (random), so no frozen copy of it is useful: it is trained
  whole next to the adapters (peft's modules_to_save), and saved in the critic's adapter folder;
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
import warnings
from dataclasses import dataclass
from typing import Iterator, Optional, Union

import torch
from torch import Tensor

from hybridrl.errors import ConfigError, HybridRLError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."  # peft's prefix on the wrapped model's parameter names
INSTALL = "pip install 'hybridrl[lora]' (the peft package)"


POLICY_KEY, CRITIC_KEY = "actor_rollout_ref.model", "critic.model"  # the config sections of the lora_* keys


@dataclass(frozen=True)
class LoraSettings:
    """actor_rollout_ref.model.lora_* or critic.model.lora_* (verl's names)."""

    rank: int  # r, the adapter's inner dimension
    alpha: float  # the update is scaled by alpha / rank
    target_modules: Union[str, list[str]]  # "all-linear" (every Linear but the output head) or module names
    exclude_modules: Union[str, list[str], None] = None  # module names (or a regex) never adapted
    adapter_path: Optional[str] = None  # start from this adapter folder instead of B = 0
    task_type: str = "CAUSAL_LM"  # peft's: CAUSAL_LM (the policy) | TOKEN_CLS (a value model, its head trained whole)
    key: str = POLICY_KEY  # the config section, named in errors


def is_lora(module: torch.nn.Module) -> bool:
    """Whether `module` is a peft-wrapped model (LoRA on)."""
    return hasattr(module, "peft_config") and hasattr(module, "disable_adapter")


def apply_lora(module: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """`module` wrapped by peft with a trainable adapter; every base parameter frozen but, for a
    value model (task_type TOKEN_CLS), its scalar head, which is trained whole.

    Dropout on the adapter is 0: the rollout, the log-prob pass and the update must compute the
    same policy, or the PPO ratio is not 1 on-policy; for the critic, the value forward and the
    update must compute the same V, which the value clip is anchored on."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if settings.adapter_path is not None:
        return PeftModel.from_pretrained(module, settings.adapter_path, is_trainable=True)
    # peft's TOKEN_CLS model adds its head names to modules_to_save only after injecting the adapters,
    # so `all-linear` would put an adapter on the head and then fail to wrap it (peft 0.21): name it first
    heads = [value_head(module)] if settings.task_type == "TOKEN_CLS" else None
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, target_modules=settings.target_modules,
                        exclude_modules=settings.exclude_modules, lora_dropout=0.0, bias="none",
                        task_type=settings.task_type, modules_to_save=heads)
    try:
        with warnings.catch_warnings():
            # peft (<= 0.21) reads transformers' `is_gradient_checkpointing`, which warns from 5.24 on that
            # it becomes `is_activation_checkpointing`: peft's call, not ours, and nothing a user can act on
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                                    category=FutureWarning)
            return get_peft_model(module, config)
    except ValueError as e:  # e.g. a target module name the model does not have
        raise ConfigError(f"{settings.key}.target_modules={settings.target_modules!r}: peft cannot apply "
                          f"LoRA to this model ({str(e).splitlines()[0]})") from e


VALUE_HEADS = ("score", "classifier")  # HF's *ForTokenClassification head: Llama family, GPT-2 / BERT family


def value_head(module: torch.nn.Module) -> str:
    """The name of a value model's scalar head (models/loading.py load_value_model)."""
    for name in VALUE_HEADS:
        if isinstance(getattr(module, name, None), torch.nn.Module):
            return name
    raise ConfigError(f"{type(module).__name__} has none of the value heads {VALUE_HEADS} that LoRA on the critic "
                      f"trains whole; set {CRITIC_KEY}.lora_rank=0")


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


def load_adapter_weights(module: torch.nn.Module, folder: str, key: str = POLICY_KEY) -> None:
    """An adapter folder's weights into the LoRA module the optimizer already holds (resume). Every
    trainable parameter must be in it: the adapters and, for a value model, its head (modules_to_save);
    `key` is the model's config section, named in errors."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = os.path.join(folder, ADAPTER_WEIGHTS)
    if not os.path.isfile(path):
        raise HybridRLError(f"{folder} has no {ADAPTER_WEIGHTS}: it was not written by a LoRA run; resume with the "
                            f"config that wrote it ({key}.lora_rank)")
    try:
        result = set_peft_model_state_dict(module, load_file(path))
    except KeyError as e:  # peft looks a wrapped module's (the value head's) weights up by name, and raises
        raise HybridRLError(_mismatch(folder, [], [e.args[0]])) from e
    trained = {name for name, p in module.named_parameters() if p.requires_grad}
    missing = [k for k in result.missing_keys if k in trained]  # frozen base weights are not in an adapter folder
    if result.unexpected_keys or missing:
        raise HybridRLError(_mismatch(folder, result.unexpected_keys, missing))


def _mismatch(folder: str, unexpected: list[str], missing: list[str]) -> str:
    return (f"{folder}'s adapter does not match the one being trained (unexpected {unexpected[:3]}, missing "
            f"{missing[:3]}); resume with the config that wrote it")


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
    from hybridrl.models.loading import quiet_loading

    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    return PeftModel.from_pretrained(model, folder).eval()
