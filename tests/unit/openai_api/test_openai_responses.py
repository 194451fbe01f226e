"""The head, chunk, usage and event framing that `hybridrl serve` and the agent proxy both send."""

import json

from hybridrl.openai_api.responses import DONE, Meta, chunk, sse, usage


def test_head_names_the_object_of_a_body_and_of_a_chunk():
    meta = Meta("chat", "policy", created=7)
    assert meta.id.startswith("chatcmpl-") and Meta("completion", "m").id.startswith("cmpl-")
    assert meta.head(False) == {"id": meta.id, "object": "chat.completion", "created": 7, "model": "policy"}
    assert meta.head(True)["object"] == "chat.completion.chunk"
    assert Meta("completion", "m").head(True)["object"] == "text_completion"


def test_chunks_carry_a_delta_or_a_text_and_usage_only_when_asked():
    chat = chunk(Meta("chat", "p"), 0, {"content": "hi"}, None, with_usage=True)
    assert chat["choices"] == [{"index": 0, "delta": {"content": "hi"}, "logprobs": None, "finish_reason": None}]
    assert chat["usage"] is None  # with stream_options.include_usage every chunk says usage: null
    text = chunk(Meta("completion", "p"), 2, "hi", "stop", with_usage=False)
    assert text["choices"][0]["text"] == "hi" and text["choices"][0]["finish_reason"] == "stop" and "usage" not in text


def test_usage_and_event_framing():
    assert usage(3, 4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    event = sse({"text": "日"})
    assert event.startswith("data: ") and event.endswith("\n\n") and json.loads(event[6:]) == {"text": "日"}
    assert "日" in event  # written as UTF-8, not \u escapes
    assert DONE == "data: [DONE]\n\n"
