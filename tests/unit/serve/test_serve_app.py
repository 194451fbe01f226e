"""Every malformed request gets its exact 4xx with OpenAI's error shape; never a traceback."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from serve_helpers import KEY, LIMITS, MODEL

from hybridrl.serve.app import AppSettings, build_app
from hybridrl.serve.backend import Backend
from hybridrl.serve.service import GenerationService

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
OK_PROMPT = {"model": MODEL, "prompt": "What is", "max_tokens": 2}
OK_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "What is 1+2?"}], "max_tokens": 2}


def error_of(response, status: int) -> dict:
    """The error object, after checking the status and that the body is exactly OpenAI's shape."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text and body["error"]["message"]
    return body["error"]


# (path, body: a dict merged into the valid request, or a raw string), expected param and code
BAD_REQUESTS = [
    (COMPLETIONS, "{not json", None, "invalid_json"),
    (COMPLETIONS, "[1, 2]", None, None),  # JSON, but not an object
    (COMPLETIONS, {"prompt": None}, "prompt", "invalid_value"),
    (COMPLETIONS, {"prompt": [1, -2, 3]}, "prompt", "invalid_value"),  # token ids are >= 0
    (COMPLETIONS, {"prompt": [[1, 2], "x", []]}, "prompt", "invalid_value"),  # an empty token list
    (COMPLETIONS, {"prompt": [True, 2]}, "prompt", "invalid_value"),  # JSON booleans are not token ids
    (COMPLETIONS, {"prompt": [1, 309]}, "prompt", "invalid_value"),  # the tokenizer has 309 tokens: 0..308
    (COMPLETIONS, {"prompt": ["x", [5, 10 ** 6]]}, "prompt[1]", "invalid_value"),
    (COMPLETIONS, {"prompt": []}, "prompt", "invalid_value"),
    (COMPLETIONS, {"prompt": ""}, "prompt", "invalid_value"),  # 0 tokens
    (COMPLETIONS, {"prompt": "1 " * 300}, "prompt", "context_length_exceeded"),  # 600 tokens > 256
    (COMPLETIONS, {"prompt": "1" * 200, "max_tokens": 60}, "max_tokens", "context_length_exceeded"),
    (COMPLETIONS, {"max_tokens": -1}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"max_tokens": 0}, "max_tokens", "invalid_value"),  # 0 only with echo
    (COMPLETIONS, {"max_tokens": -1, "echo": True}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"max_tokens": 65}, "max_tokens", "invalid_value"),  # > --max-tokens-limit 64
    (COMPLETIONS, {"max_tokens": 10 ** 30}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"max_tokens": "16"}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"max_tokens": 2.5}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"temperature": -0.1}, "temperature", "invalid_value"),
    (COMPLETIONS, {"temperature": 2.5}, "temperature", "invalid_value"),
    (COMPLETIONS, '{"model": "tiny-arith", "prompt": "x", "temperature": NaN}', "temperature", "invalid_value"),
    (COMPLETIONS, {"top_p": 0}, "top_p", "invalid_value"),
    (COMPLETIONS, {"top_k": -2}, "top_k", "invalid_value"),
    (COMPLETIONS, {"n": 0}, "n", "invalid_value"),
    (COMPLETIONS, {"n": 5}, "n", "invalid_value"),  # > --max-n 4
    (COMPLETIONS, {"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
    (COMPLETIONS, {"stop": [""]}, "stop", "invalid_value"),
    (COMPLETIONS, {"stop": 5}, "stop", "invalid_value"),
    (COMPLETIONS, {"seed": "x"}, "seed", "invalid_value"),
    (COMPLETIONS, {"stream": "yes"}, "stream", "invalid_value"),
    (COMPLETIONS, {"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),  # no stream
    (COMPLETIONS, {"stream": True, "stream_options": {"bogus": 1}}, "stream_options.bogus", "unrecognized_argument"),
    (COMPLETIONS, {"foo": 1}, "foo", "unrecognized_argument"),
    (COMPLETIONS, {"logprobs": 6}, "logprobs", "invalid_value"),  # OpenAI's legacy bound: 0..5
    (COMPLETIONS, {"logprobs": -1}, "logprobs", "invalid_value"),
    (COMPLETIONS, {"logprobs": True}, "logprobs", "invalid_value"),  # an int, not chat's boolean
    (COMPLETIONS, {"echo": True, "stream": True}, "echo", "unsupported_parameter"),
    (COMPLETIONS, {"echo": "yes"}, "echo", "invalid_value"),
    (COMPLETIONS, {"best_of": 2}, "best_of", "unsupported_parameter"),
    (COMPLETIONS, {"suffix": "x"}, "suffix", "unsupported_parameter"),
    (COMPLETIONS, {"presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
    (COMPLETIONS, {"frequency_penalty": -1}, "frequency_penalty", "unsupported_parameter"),
    (COMPLETIONS, {"logit_bias": {"5": 10}}, "logit_bias", "unsupported_parameter"),
    (CHAT, {"messages": []}, "messages", "invalid_value"),
    (CHAT, {"messages": [{"role": "function", "content": "x"}]}, "messages[0].role", "invalid_value"),
    (CHAT, {"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content", "invalid_value"),
    (CHAT, {"messages": [{"role": "user", "content": "x", "extra": 1}]}, "messages[0].extra", "unrecognized_argument"),
    (CHAT, {"max_completion_tokens": 0}, "max_completion_tokens", "invalid_value"),
    (CHAT, {"max_tokens": 1000}, "max_tokens", "invalid_value"),
    (CHAT, {"logprobs": 1}, "logprobs", "invalid_value"),  # a boolean, not the legacy int
    (CHAT, {"top_logprobs": 2}, "top_logprobs", "invalid_value"),  # needs logprobs: true
    (CHAT, {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),  # OpenAI's bound: 0..20
    (CHAT, {"logprobs": True, "top_logprobs": -1}, "top_logprobs", "invalid_value"),
    # tiny-arith's chat template does not render tools (test_serve_tools.py serves one that does)
    (CHAT, {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "unsupported_parameter"),
    (CHAT, {"tool_choice": "auto"}, "tool_choice", "invalid_value"),  # no tools
    (CHAT, {"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
]


@pytest.mark.parametrize("path, body, param, code", BAD_REQUESTS)
def test_malformed_request_is_a_400_naming_the_field(client, path, body, param, code):
    if isinstance(body, dict):
        r = client.post(path, json={**(OK_PROMPT if path == COMPLETIONS else OK_CHAT), **body})
    else:
        r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    err = error_of(r, 400)
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param, code)


# half of an emoji's UTF-16 pair, as a client that cut the string sends it: used to be a 500 (the tokenizer's
# TypeError), and a 500 too where an error echoed it (the model's 404), since a JSON response is written as UTF-8
LONE_SURROGATES = [
    (COMPLETIONS, {"prompt": "What is \ud83d"}, "prompt"),
    (COMPLETIONS, {"prompt": ["What is", "1+2 \ud83d"]}, "prompt[1]"),
    (COMPLETIONS, {"stop": ["\ud83d"]}, "stop[0]"),  # never tokenized, but it could never match either
    (COMPLETIONS, {"model": "tiny\udc00"}, "model"),
    (CHAT, {"messages": [{"role": "user", "content": "What is 1+2? \ud83d"}]}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "What is"}, {"type": "text", "text": " 1+2? \udfff"}]}]},
     "messages[1].content[1].text"),
    (CHAT, {"messages": [{"role": "user", "content": "x", "ex\ud83dtra": 1}]}, "messages[0].ex\\ud83dtra"),
]


@pytest.mark.parametrize("path, body, param", LONE_SURROGATES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_is_a_400_naming_the_field(client, path, body, param, stream):
    request = {**(OK_PROMPT if path == COMPLETIONS else OK_CHAT), **body, "stream": stream}
    raw = json.dumps(request)  # ASCII: the surrogate is the escape "\ud83d", legal JSON
    err = error_of(client.post(path, content=raw, headers={"Content-Type": "application/json"}), 400)
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param, "invalid_value")
    assert err["message"].startswith(f"Invalid value for '{param}': it holds a lone surrogate \\u")


def test_the_lone_surrogate_message_says_where_and_what_to_send(client):
    raw = json.dumps({**OK_CHAT, "messages": [{"role": "user", "content": "What is 1+2? \ud83d"}]})
    err = error_of(client.post(CHAT, content=raw, headers={"Content-Type": "application/json"}), 400)
    assert err["message"] == ("Invalid value for 'messages[0].content': it holds a lone surrogate \\ud83d at "
                              "character 13 (half of a UTF-16 pair, left when text is cut inside an emoji or another "
                              "character beyond U+FFFF); it has no UTF-8 form, so no tokenizer can read it; send "
                              "whole characters")
    whole = json.dumps({**OK_CHAT, "messages": [{"role": "user", "content": "What is 1+2? \U0001f600"}]})
    assert client.post(CHAT, content=whole, headers={"Content-Type": "application/json"}).status_code == 200


@pytest.mark.parametrize("path, body, param", [(COMPLETIONS, {"model": MODEL}, "prompt"),
                                               (CHAT, {"model": MODEL}, "messages"),
                                               (COMPLETIONS, {"prompt": "x"}, "model")])
def test_missing_field_is_a_400_naming_it(client, path, body, param):
    err = error_of(client.post(path, json=body), 400)
    assert (err["param"], err["code"]) == (param, "missing_required_parameter")


def test_default_values_of_unsupported_features_are_accepted(client):
    defaults = {"logprobs": None, "echo": False, "best_of": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
                "user": "someone", "suffix": None, "logit_bias": {}}
    assert client.post(COMPLETIONS, json={**OK_PROMPT, **defaults}).status_code == 200
    chat = {"logprobs": False, "tools": None, "tool_choice": "none", "response_format": {"type": "text"}}
    assert client.post(CHAT, json={**OK_CHAT, **chat}).status_code == 200


def test_unknown_model_is_a_404(client):
    err = error_of(client.post(COMPLETIONS, json={**OK_PROMPT, "model": "gpt-4"}), 404)
    assert (err["param"], err["code"]) == ("model", "model_not_found")
    assert error_of(client.get("/v1/models/gpt-4"), 404)["code"] == "model_not_found"
    assert client.get(f"/v1/models/{MODEL}").json()["id"] == MODEL


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {KEY}", "Bearer", f"Bearer {KEY}x"])
def test_a_wrong_or_missing_api_key_is_a_401(client, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    client.headers.pop("Authorization")
    try:
        for r in (client.post(COMPLETIONS, json=OK_PROMPT, headers=headers), client.get("/v1/models", headers=headers)):
            assert error_of(r, 401)["code"] == "invalid_api_key"
        assert client.get("/health").status_code == 200  # open without a key
    finally:
        client.headers["Authorization"] = f"Bearer {KEY}"


def test_unknown_route_is_a_404_and_wrong_method_a_405(client):
    assert error_of(client.get("/v1/nothing"), 404)["code"] == "not_found"
    assert error_of(client.post("/v2/completions", json=OK_PROMPT), 404)["code"] == "not_found"
    assert error_of(client.get(COMPLETIONS), 405)["code"] == "method_not_allowed"
    assert error_of(client.delete("/v1/models"), 405)["code"] == "method_not_allowed"


def test_a_body_over_the_limit_is_a_413_before_parsing(client):
    big = json.dumps({**OK_PROMPT, "prompt": "x" * 5000})  # > --max-body-bytes 4096
    assert error_of(client.post(COMPLETIONS, content=big), 413)["code"] == "request_too_large"
    # without a Content-Length (chunked), the bytes are counted as they arrive
    r = client.post(COMPLETIONS, content=(big[i:i + 1000].encode() for i in range(0, len(big), 1000)))
    assert "content-length" not in r.request.headers
    assert error_of(r, 413)["code"] == "request_too_large"


def test_an_internal_error_is_a_500_without_details(client, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(GenerationService, "submit", boom)
    r = client.post(COMPLETIONS, json=OK_PROMPT)
    err = error_of(r, 500)
    assert err["type"] == "internal_server_error" and "secret" not in r.text
    assert "secret internal detail" in caplog.text  # the traceback went to the log


def test_models_and_health(client):
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 256
    assert client.get("/health").json() == {"status": "ok"}


def test_a_stopped_worker_is_a_503_not_a_hang(tiny):
    class Gone(Backend):
        name = "gone"

        def serve(self, inbox):  # returns at once: the worker thread ends
            return

    service = GenerationService(Gone(), tiny.tok, tiny.eos)
    service.worker.join(timeout=10)
    with TestClient(build_app(service, AppSettings(MODEL, None, LIMITS))) as c:
        assert error_of(c.post(COMPLETIONS, json=OK_PROMPT), 503)["code"] == "worker_stopped"
        assert c.get("/health").status_code == 503


def test_every_route_but_health_needs_the_key(client):
    """Issue #48 part 3, for every route the app has (a route added later is covered too): no key or a wrong one is
    a 401 before the route runs; /health alone is open."""
    from fastapi.routing import APIRoute

    routes = [(m, r.path) for r in client.app.routes if isinstance(r, APIRoute) for m in r.methods]
    assert ("POST", COMPLETIONS) in routes and ("GET", "/metrics") in routes
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        for method, path in routes:
            r = client.request(method, path.replace("{model_id:path}", MODEL), headers=headers, json={})
            if path == "/health":
                assert r.status_code == 200
            else:
                assert r.status_code == 401 and error_of(r, 401)["code"] == "invalid_api_key", (method, path)
