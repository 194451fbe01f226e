"""Tool calls through the official `openai` client against a real uvicorn server (in a thread) whose backend writes
a scripted turn, as a model that calls tools would: the client parses `tool_calls`, streamed `delta.tool_calls`,
and sends the call and its result back in the history (its own message object), which the template renders."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn

openai = pytest.importorskip("openai")

from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from hybridrl.serve.app import AppSettings, build_app  # noqa: E402
from hybridrl.serve.requests import Limits  # noqa: E402
from hybridrl.serve.service import GenerationService  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "serve"))
from serve_tools import CALL, TOOLS, ScriptedBackend, scripted_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "tiny-arith"
ASK = [{"role": "user", "content": "What is 12+30?"}]


@pytest.fixture(scope="module")
def served():
    """(openai client, scripted backend) on a uvicorn server at 127.0.0.1 (a free port)."""
    path = resolve_model_path(MODEL)
    tok = scripted_tokenizer(load_tokenizer(path))
    eos = eos_token_ids(load_causal_lm(path), tok)
    backend = ScriptedBackend(tok, eos)
    app = build_app(GenerationService(backend, tok, eos), AppSettings(MODEL, None, Limits(1024, 256)))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60), backend
    server.should_exit = True
    thread.join(timeout=30)


def test_a_call_round_trip_with_the_openai_client(served):
    api, backend = served
    backend.script = CALL
    first = api.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=200)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "12+30"}
    backend.script = "42"  # the client sends its own message object back, then the tool's result
    history = [*ASK, choice.message, {"role": "tool", "tool_call_id": call.id, "content": "42"}]
    second = api.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=200)
    assert second.choices[0].message.content == "42" and second.choices[0].finish_reason == "stop"
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the call and its result were rendered


def test_streamed_tool_calls_with_the_openai_client(served):
    api, backend = served
    backend.script = "Let me compute. " + CALL
    text, calls, finish = "", {}, None
    for chunk in api.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=200, stream=True):
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for c in delta.tool_calls or []:
            calls[c.index] = (c.function.name, c.function.arguments)
        finish = chunk.choices[0].finish_reason or finish
    assert text == "Let me compute. " and finish == "tool_calls"
    assert calls == {0: ("calculator", '{"expression": "12+30"}')}
