"""The bundled tiny-arith model behind the server's app (HF engine), shared by the serve unit tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from serve_helpers import KEY, LIMITS, MODEL, make_service

from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
from hybridrl.serve.app import AppSettings, build_app


@pytest.fixture(scope="session")
def tiny():
    folder = resolve_model_path(MODEL)
    tok, model = load_tokenizer(folder), load_causal_lm(folder)
    return SimpleNamespace(tok=tok, model=model.eval(), eos=eos_token_ids(model, tok))


@pytest.fixture(scope="module")
def client(tiny):
    """A TestClient (API key sent) on a fresh service; server errors become 500 responses, as in production."""
    app = build_app(make_service(tiny), AppSettings(MODEL, KEY, LIMITS))
    with TestClient(app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c
