"""A model turn split into OpenAI `tool_calls` (a malformed call stays text) and a history rendered for the chat
template, as `hybridrl serve` and the agent proxy both answer them."""

from __future__ import annotations

import json

from hybridrl.openai_api.protocol import Message
from hybridrl.openai_api.tools import split_turn, template_messages

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>'
BROKEN = '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>'


def test_split_turn():
    one = split_turn(CALL)
    assert one.content is None and one.malformed == 0 and len(one.calls) == 1
    call = one.calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "12+30"}'}
    two = split_turn("Let me compute.\n" + CALL + "\n" + CALL.replace("12+30", "1+2"))
    assert two.content == "Let me compute.\n\n" and [json.loads(c["function"]["arguments"]) for c in two.calls] == [
        {"expression": "12+30"}, {"expression": "1+2"}]
    assert split_turn("42") == split_turn("42")
    assert (split_turn("42").content, split_turn("42").calls, split_turn("42").malformed) == ("42", [], 0)
    for broken in (BROKEN, CALL + BROKEN, '<tool_call>{"arguments": {}}</tool_call>', "<tool_call>{\"name\": \"x\""):
        turn = split_turn(broken)
        assert (turn.content, turn.calls, turn.malformed) == (broken, [], 1)


def test_template_messages_give_the_template_arguments_as_objects():
    history = [Message(role="assistant", tool_calls=[
        {"id": "c1", "function": {"name": "calculator", "arguments": '{"expression": "1+2"}'}}]),
        Message(role="tool", content="3", tool_call_id="c1")]
    assert template_messages(history) == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+2"}}}]},
        {"role": "tool", "content": "3", "tool_call_id": "c1"}]
