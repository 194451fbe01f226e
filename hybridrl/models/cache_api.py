"""The keyword a model's forward takes its KV cache under.

transformers 5.24 renamed the forward argument `past_key_values` to `cache` on most decoder models; the old
name still works there but warns (FutureWarning) on every call and goes away in 5.40. Earlier 5.x releases,
and models not migrated yet, know only `past_key_values`. So the name is read from the forward's own signature
(transformers' decorators keep it through functools.wraps), once per model class, and every call site passes
its cache through `cache_kwargs`: no warning on new releases, no TypeError on old ones.
"""

from __future__ import annotations

import functools
import inspect

from torch import nn

NEW, OLD = "cache", "past_key_values"


def cache_kwargs(model: nn.Module, cache) -> dict:
    """{keyword: cache} for `model(...)`: the keyword its forward declares (`cache` where it has one)."""
    return {cache_keyword(type(unwrapped(model))): cache}


@functools.lru_cache(maxsize=None)
def cache_keyword(cls: type) -> str:
    """`cache` when cls.forward declares it, else `past_key_values`."""
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):  # a forward whose signature cannot be read: the name every 5.x release knows
        return OLD
    return NEW if NEW in params else OLD


def unwrapped(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (get_base_model) or DDP (.module); FSDP2 keeps the class."""
    while True:
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif isinstance(getattr(model, "module", None), nn.Module):
            model = model.module
        else:
            return model
