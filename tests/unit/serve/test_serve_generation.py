"""What the server generates: the rollout engine's tokens, usage counts, the chat template, stop strings,
max_tokens, seeds, n, and streams that concatenate to the non-streamed text."""

from __future__ import annotations

import json

import pytest
import torch
from serve_helpers import MODEL, chat_ids

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.serve.jobs import choice_keys

BABBLE = "What is"  # greedy, tiny-arith answers this with 40+ digits: room for stop strings and length limits


def complete(client, **fields) -> dict:
    r = client.post("/v1/completions", json={"model": MODEL, **fields})
    assert r.status_code == 200, r.text
    return r.json()


def chat(client, **fields) -> dict:
    r = client.post("/v1/chat/completions", json={"model": MODEL, **fields})
    assert r.status_code == 200, r.text
    return r.json()


def events(client, path: str, body: dict) -> list[dict]:
    """The server-sent events of a streamed request, checking the framing and the final [DONE]."""
    r = client.post(path, json={"model": MODEL, "stream": True, **body})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = r.text.split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""] and all(f.startswith("data: ") for f in frames[:-1])
    return [json.loads(f.removeprefix("data: ")) for f in frames[:-2]]


def engine_tokens(tiny, prompt: list[int], seed: int, max_tokens: int, temperature: float) -> list[int]:
    """What the rollout engine itself samples for choice 0 of a request with this seed."""
    engine = HFRolloutEngine(tiny.model, tiny.eos, tiny.tok.pad_token_id)
    sampling = SamplingParams(max_tokens, temperature=temperature or 1.0, do_sample=temperature > 0)
    out = engine.generate_keyed(torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long), sampling,
                                torch.tensor(choice_keys(seed, 1)))
    return out.response_ids[0][out.response_mask[0].bool()].tolist()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_text_and_usage_are_the_rollout_engines_tokens(client, tiny, temperature):
    prompt = "12+30="
    body = complete(client, prompt=prompt, max_tokens=12, temperature=temperature, seed=5)
    ids = tiny.tok(prompt)["input_ids"]
    expected = engine_tokens(tiny, ids, 5, 12, temperature)
    c = body["choices"][0]
    assert c["text"] == tiny.tok.decode(expected, skip_special_tokens=True)
    assert c["finish_reason"] == ("stop" if expected[-1] in tiny.eos else "length")
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(expected),
                             "total_tokens": len(ids) + len(expected)}
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == MODEL


def test_chat_applies_the_chat_template(client, tiny):
    messages = [{"role": "system", "content": "You add."}, {"role": "user", "content": "What is 12+30?"}]
    body = chat(client, messages=messages, temperature=0, max_tokens=8)
    ids = chat_ids(tiny.tok, messages)
    assert body["usage"]["prompt_tokens"] == len(ids)
    # the same tokens sent as a raw completion prompt give the same answer
    rendered = tiny.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    raw = complete(client, prompt=rendered, temperature=0, max_tokens=8)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": raw["choices"][0]["text"]}
    assert body["usage"] == raw["usage"] and body["object"] == "chat.completion"


def test_chat_content_parts_are_joined_text(client):
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "12+30?"}]
    as_parts = chat(client, messages=[{"role": "user", "content": parts}], temperature=0, max_tokens=8)
    as_text = chat(client, messages=[{"role": "user", "content": "What is 12+30?"}], temperature=0, max_tokens=8)
    assert as_parts["choices"] == as_text["choices"] and as_parts["usage"] == as_text["usage"]


def test_chat_default_max_tokens_is_the_rest_of_the_context_up_to_the_limit(client):
    body = chat(client, messages=[{"role": "user", "content": "1 " * 100}], temperature=0)
    assert body["usage"]["completion_tokens"] <= 64  # LIMITS.max_tokens_limit
    too_long = client.post("/v1/chat/completions", json={"model": MODEL, "messages": [
        {"role": "user", "content": "1 " * 200}]})  # ~415 tokens: no room at all
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "messages"


def test_stop_string_truncates_the_text_and_finishes_with_stop(client):
    full = complete(client, prompt=BABBLE, max_tokens=40, temperature=0)["choices"][0]["text"]
    assert len(full) >= 30
    stop = full[10:13]
    cut = complete(client, prompt=BABBLE, max_tokens=40, temperature=0, stop=["zz", stop])
    assert cut["choices"][0]["text"] == full[:full.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] < 40  # generation stopped there too


def test_max_tokens_finishes_with_length(client):
    body = complete(client, prompt=BABBLE, max_tokens=7, temperature=0)
    full = complete(client, prompt=BABBLE, max_tokens=40, temperature=0)
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 7
    assert full["choices"][0]["text"].startswith(body["choices"][0]["text"])


def test_seed_makes_sampling_reproducible_and_n_gives_distinct_choices(client, tiny):
    req = dict(prompt="hello world", max_tokens=20, temperature=1.5, n=4, seed=11)
    first, again = complete(client, **req), complete(client, **req)
    assert [c["index"] for c in first["choices"]] == [0, 1, 2, 3]
    assert first["choices"] == again["choices"]
    assert len({c["text"] for c in first["choices"]}) > 1
    assert first["usage"]["prompt_tokens"] == len(tiny.tok("hello world")["input_ids"])  # once, not n times
    other = complete(client, **{**req, "seed": 12})
    assert other["choices"] != first["choices"]


def test_a_list_of_prompts_gives_n_choices_per_prompt_in_order(client, tiny):
    body = complete(client, prompt=["12+30=", BABBLE], max_tokens=5, temperature=0, n=2)
    texts = [c["text"] for c in body["choices"]]
    alone = [complete(client, prompt=p, max_tokens=5, temperature=0)["choices"][0]["text"] for p in ("12+30=", BABBLE)]
    assert texts == [alone[0], alone[0], alone[1], alone[1]]
    assert body["usage"]["prompt_tokens"] == len(tiny.tok("12+30=")["input_ids"]) + len(tiny.tok(BABBLE)["input_ids"])


@pytest.mark.parametrize("stop", [None, ["9"]])
def test_completion_stream_concatenates_to_the_non_streamed_text(client, stop):
    body = dict(prompt=BABBLE, max_tokens=30, temperature=1.0, seed=3, n=2, stop=stop)
    whole = complete(client, **body)
    chunks = events(client, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    for i in range(2):
        mine = [c["choices"][0] for c in chunks[:-1] if c["choices"][0]["index"] == i]
        assert "".join(c["text"] for c in mine) == whole["choices"][i]["text"]
        assert [c["finish_reason"] for c in mine][-1] == whole["choices"][i]["finish_reason"]
        assert all(c["finish_reason"] is None for c in mine[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(c["usage"] is None for c in chunks[:-1])


def test_chat_stream_opens_with_the_role_and_concatenates_to_the_message(client):
    body = dict(messages=[{"role": "user", "content": "What is 12+30?"}], max_tokens=10, temperature=0)
    whole = chat(client, **body)
    chunks = events(client, "/v1/chat/completions", body)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks) and "usage" not in chunks[0]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert len(chunks) >= 3  # the text came in pieces, not all at the end
