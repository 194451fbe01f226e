"""models/cache_api.py: the KV cache goes under the keyword the model's forward declares, through wrappers."""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn

from hybridrl.models.cache_api import cache_keyword, cache_kwargs, unwrapped
from hybridrl.models.memory import disable_checkpointing, enable_checkpointing, is_checkpointing


class Renamed(nn.Module):  # transformers >= 5.24
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        return cache


def decorated(fn):  # how transformers' decorators wrap forward (deprecate_kwarg, can_return_tuple)
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class RenamedAndDecorated(nn.Module):
    @decorated
    def forward(self, input_ids=None, cache=None, **kwargs):
        return cache


class Old(nn.Module):  # transformers < 5.24, and models not migrated yet
    def forward(self, input_ids=None, past_key_values=None, **kwargs):
        return past_key_values


class PeftLike(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.base = base

    def get_base_model(self):
        return self.base

    def forward(self, *args, **kwargs):
        return self.base(*args, **kwargs)


class DDPLike(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def test_the_keyword_is_the_one_the_forward_declares():
    assert cache_keyword(Renamed) == cache_keyword(RenamedAndDecorated) == "cache"
    assert cache_keyword(Old) == "past_key_values"


def test_the_cache_reaches_the_model_through_wrappers():
    cache = object()
    for model in (Renamed(), Old(), PeftLike(Renamed()), DDPLike(PeftLike(Old())), DDPLike(RenamedAndDecorated())):
        assert model(input_ids=None, **cache_kwargs(model, cache)) is cache
    inner = Old()
    assert unwrapped(DDPLike(PeftLike(inner))) is inner


def test_the_installed_transformers_gets_its_own_keyword_without_a_warning(random_model_dir):
    from transformers import DynamicCache

    from hybridrl.models.loading import load_causal_lm

    model = load_causal_lm(random_model_dir)
    cache = DynamicCache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        with torch.no_grad():
            model(input_ids=torch.tensor([[3, 4, 5]]), use_cache=True, **cache_kwargs(model, cache))
        enable_checkpointing(model)
        assert is_checkpointing(model)
        disable_checkpointing(model)
        assert not is_checkpointing(model)
    assert cache.get_seq_length() == 3  # the cache was the one the forward filled
