"""Tool calls on /v1/chat/completions: tools rendered by the chat template, the model's Hermes blocks returned as
OpenAI `tool_calls` (streamed too), a malformed call returned as text and counted, and the 400s."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from serve_helpers import MODEL
from serve_tools import CALL, TOOLS, ScriptedBackend, scripted_tokenizer
from test_serve_app import error_of
from test_serve_generation import events

from hybridrl.serve.app import AppSettings, build_app
from hybridrl.serve.requests import Limits
from hybridrl.serve.responses import ToolStream
from hybridrl.serve.service import GenerationService

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "What is 12+30?"}]
BROKEN = '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>'
# the tiny tokenizer spells the tools' JSON in ~190 tokens: a context no model limits (the backend is scripted)
LIMITS = Limits(max_model_len=1024, max_tokens_limit=256)


@pytest.fixture(scope="module")
def scripted(tiny):
    """(client, backend, tokenizer): the app over a backend that writes `backend.script`, with a tools template."""
    tok = scripted_tokenizer(tiny.tok)
    backend = ScriptedBackend(tok, tiny.eos)
    app = build_app(GenerationService(backend, tok, tiny.eos), AppSettings(MODEL, None, LIMITS))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, backend, tok


def ask(scripted, script: str, **body) -> dict:
    client, backend, _ = scripted
    backend.script = script
    r = client.post(CHAT, json={"model": MODEL, "messages": ASK, "tools": TOOLS, "max_tokens": 200, **body})
    assert r.status_code == 200, r.text
    return r.json()


def counters(client) -> dict[str, int]:
    text = client.get("/metrics").text
    return {line.split()[0]: int(line.split()[1]) for line in text.splitlines() if not line.startswith("#")}


def test_tool_stream_never_sends_part_of_a_call_as_text():
    text = "Sure. " + CALL
    stream, sent = ToolStream(), ""
    for ch in text:
        sent += stream.feed(ch)
    assert sent == "Sure. "
    turn = stream.finish()
    assert turn.content is None and turn.calls[0]["function"]["name"] == "calculator"
    plain = ToolStream()
    assert plain.feed("12 <tool") == "12 " and plain.feed("s>") == "<tools>" and plain.finish().content == ""


def test_a_call_is_returned_as_tool_calls_and_counted(scripted):
    before = counters(scripted[0])
    c = ask(scripted, CALL)["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
    assert [t["function"] for t in c["message"]["tool_calls"]] == [
        {"name": "calculator", "arguments": '{"expression": "12+30"}'}]
    after = counters(scripted[0])
    assert after["hybridrl_serve_tool_calls_total"] == before["hybridrl_serve_tool_calls_total"] + 1


def test_a_malformed_call_is_text_with_stop_and_counted(scripted):
    before = counters(scripted[0])["hybridrl_serve_malformed_tool_calls_total"]
    c = ask(scripted, BROKEN)["choices"][0]
    assert c["message"] == {"role": "assistant", "content": BROKEN} and c["finish_reason"] == "stop"
    assert counters(scripted[0])["hybridrl_serve_malformed_tool_calls_total"] == before + 1


def test_tool_choice_none_parses_nothing(scripted):
    c = ask(scripted, CALL, tool_choice="none")["choices"][0]
    assert c["message"]["content"] == CALL and c["finish_reason"] == "stop" and "tool_calls" not in c["message"]


@pytest.mark.parametrize("script", ["Let me see. " + CALL, BROKEN, "42"])
def test_streamed_calls_and_text_match_the_whole_answer(scripted, script):
    whole = ask(scripted, script)["choices"][0]
    client, backend, _ = scripted
    chunks = [ch for ev in events(client, CHAT, {"messages": ASK, "tools": TOOLS, "max_tokens": 200})
              for ch in ev["choices"]]
    content = "".join(ch["delta"].get("content") or "" for ch in chunks)
    calls = [call for ch in chunks for call in ch["delta"].get("tool_calls", [])]
    assert content == (whole["message"]["content"] or "") and "<tool" not in content.replace(BROKEN, "")
    assert [c["function"] for c in calls] == [c["function"] for c in whole["message"].get("tool_calls", [])]
    assert all(c["index"] == k for k, c in enumerate(calls))
    assert chunks[-1]["finish_reason"] == whole["finish_reason"]


def test_history_with_calls_and_results_renders_through_the_template(scripted):
    client, _, tok = scripted
    history = ASK + [{"role": "assistant", "tool_calls": [  # content left out, as OpenAI clients may
        {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12+30"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}]
    body = ask(scripted, "42", messages=history)
    rendered = [*ASK, {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "calculator", "arguments": {"expression": "12+30"}}}]}, {"role": "tool", "content": "42",
                                                                          "tool_call_id": "c1"}]
    ids = tok.apply_chat_template(rendered, tools=TOOLS, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["choices"][0]["message"]["content"] == "42" and body["choices"][0]["finish_reason"] == "stop"


BAD_TOOL_REQUESTS = [
    ({"tool_choice": "required"}, "tool_choice", "unsupported_parameter"),
    ({"tool_choice": {"type": "function", "function": {"name": "calculator"}}}, "tool_choice", "unsupported_parameter"),
    ({"tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
    ({"tools": None, "tool_choice": "auto"}, "tool_choice", "invalid_value"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name",
     "missing_required_parameter"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "invalid_value"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls", "unsupported_parameter"),
    ({"messages": [{"role": "tool", "content": "3"}]}, "messages[0]", "invalid_value"),  # no tool_call_id
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "invalid_value"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0]", "invalid_value"),  # no tool_calls
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0]", "invalid_value"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments", "invalid_value"),
]


@pytest.mark.parametrize("body, param, code", BAD_TOOL_REQUESTS)
def test_bad_tool_requests_are_400s_naming_the_field(scripted, body, param, code):
    r = scripted[0].post(CHAT, json={"model": MODEL, "messages": ASK, "tools": TOOLS, **body})
    err = error_of(r, 400)
    assert (err["param"], err["code"]) == (param, code)


def test_tools_need_a_template_that_renders_them(client):
    """The bundled model's template ignores tools: the model would never see them, so it is a 400."""
    err = error_of(client.post(CHAT, json={"model": MODEL, "messages": ASK, "tools": TOOLS}), 400)
    assert (err["param"], err["code"]) == ("tools", "unsupported_parameter") and "template" in err["message"]
