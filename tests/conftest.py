"""Shared fixtures: a tiny random Qwen2 chat model and a small arithmetic dataset, built locally."""

from __future__ import annotations

import pytest
import torch

from hybridrl.data.arithmetic import write_dataset
from hybridrl.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 32-wide random model with the project's tokenizer (fast to run)."""
    out = tmp_path_factory.mktemp("random-model")
    tok = build_tokenizer()
    model = build_model(tok, hidden=32, layers=2, heads=2, intermediate=64, seed=0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> dict[str, str]:
    return write_dataset(str(tmp_path_factory.mktemp("arith")), train_size=300, val_size=40, seed=0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
