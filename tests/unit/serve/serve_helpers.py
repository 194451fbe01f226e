"""Constants and builders shared by the serve unit tests (conftest.py holds the fixtures)."""

from __future__ import annotations

from hybridrl.serve.hf import HFBackend
from hybridrl.serve.requests import Limits
from hybridrl.serve.service import GenerationService

MODEL, KEY = "tiny-arith", "test-key"
# small bounds so the limit checks are cheap to reach: context 256 (the model's), max_tokens <= 64, n <= 4
LIMITS = Limits(max_model_len=256, max_tokens_limit=64, max_n=4, max_body_bytes=4096)


def make_service(tiny, backend_cls=HFBackend, max_num_seqs: int = 8, **kwargs) -> GenerationService:
    backend = backend_cls(tiny.model, tiny.eos, tiny.tok.pad_token_id, max_num_seqs, LIMITS.max_model_len, **kwargs)
    return GenerationService(backend, tiny.tok, tiny.eos, seed=0)


def chat_ids(tok, messages) -> list[int]:
    """HF's own tokenization of the chat template with the generation prompt."""
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])
