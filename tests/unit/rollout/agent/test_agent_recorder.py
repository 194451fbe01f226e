"""The agent recorder: prefix match appends only the new suffix (mask 0), generated ids and log-probs kept as
sampled (mask 1), an assistant turn sent back as OpenAI JSON matched to the raw text the model wrote, and a
non-append-only template starts a new segment."""

from __future__ import annotations

import pytest

from hybridrl.models.tiny import build_tokenizer
from hybridrl.rollout.agent.recorder import Recorder

DROP_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
              "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] }}"
              "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def render(tok, messages):
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_two_turns_append_only_suffix_with_mask_zero(tok):
    rec = Recorder(tok)
    user = [{"role": "user", "content": "What is 2+3?"}]
    first = rec.prompt(render(tok, user))
    assert first == ids(tok, render(tok, user))
    gen = ids(tok, "<tool_call>{\"name\": \"calc\", \"arguments\": {\"e\": \"2+3\"}}</tool_call>") + [tok.eos_token_id]
    lps = [-0.5 - i / 100 for i in range(len(gen))]
    raw = tok.decode(gen[:-1])
    returned = {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "calc", "arguments": "{\"e\": \"2+3\"}"}}]}
    rec.record(gen, lps, returned, raw)
    # the agent sends its turn back as OpenAI JSON (spacing differs from what the model wrote) and a tool result
    history = rec.raw_history(user + [dict(returned), {"role": "tool", "content": "5", "tool_call_id": "c1"}])
    assert history[1] == {"role": "assistant", "content": raw}
    second = rec.prompt(render(tok, history))
    seg = rec.sample()
    suffix = ids(tok, "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    assert second == first + gen + suffix  # the generated ids exactly as sampled, never re-tokenized
    assert seg.mask == [1] * len(gen) + [0] * len(suffix)
    assert seg.log_probs == lps + [0.0] * len(suffix)
    assert rec.segments_dropped == 0


def test_edited_history_is_not_matched_to_the_raw_turn(tok):
    rec = Recorder(tok)
    rec.prompt(render(tok, [{"role": "user", "content": "hi"}]))
    rec.record(ids(tok, "ab") + [tok.eos_token_id], [-1.0] * 3, {"role": "assistant", "content": "ab"}, "ab")
    edited = rec.raw_history([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "zz"}])
    assert edited[1]["content"] == "zz"


def test_a_template_that_drops_earlier_thinking_starts_a_new_segment(tok):
    rec = Recorder(tok)
    user = [{"role": "user", "content": "hi"}]
    rec.prompt(tok.apply_chat_template(user, chat_template=DROP_THINK, add_generation_prompt=True, tokenize=False))
    gen = ids(tok, "<think>x</think>ab") + [tok.eos_token_id]
    rec.record(gen, [-1.0] * len(gen), {"role": "assistant", "content": "<think>x</think>ab"}, "<think>x</think>ab")
    history = rec.raw_history(user + [{"role": "assistant", "content": "<think>x</think>ab"},
                                      {"role": "user", "content": "more"}])
    text = tok.apply_chat_template(history, chat_template=DROP_THINK, add_generation_prompt=True, tokenize=False)
    second = rec.prompt(text)
    assert "<think>" not in text  # the template rewrote the earlier turn: the recorded context no longer matches
    assert second == ids(tok, text) and rec.sample().tokens == [] and rec.segments_dropped == 1


def test_a_retry_replaces_the_previous_generation(tok):
    """The same rendering twice after a generation (a client's retry): the first generation is taken back, the
    second recorded in its place, counted; a later turn extends the retry's record as usual."""
    rec = Recorder(tok)
    text = render(tok, [{"role": "user", "content": "hi"}])
    first = rec.prompt(text)
    rec.record(ids(tok, "ab") + [tok.eos_token_id], [-1.0] * 3, {"role": "assistant", "content": "ab"}, "ab")
    assert rec.prompt(text) == first and rec.retries == 1  # nothing of the first generation is left
    gen = ids(tok, "cd") + [tok.eos_token_id]
    rec.record(gen, [-2.0] * 3, {"role": "assistant", "content": "cd"}, "cd")
    seg = rec.sample()
    assert seg.context() == first + gen and seg.mask == [1] * 3 and seg.log_probs == [-2.0] * 3
    history = rec.raw_history([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "cd"},
                               {"role": "user", "content": "more"}])
    rec.prompt(render(tok, history))
    assert rec.segments_dropped == 0 and rec.retries == 1 and len(rec.answered) == 1


def test_an_unanswered_request_sent_again_is_no_retry(tok):
    """A request whose generation never came back (the handler was cancelled) leaves nothing to take back."""
    rec = Recorder(tok)
    text = render(tok, [{"role": "user", "content": "hi"}])
    first = rec.prompt(text)
    assert rec.prompt(text) == first and rec.retries == 0 and rec.sample().tokens == []


def test_a_call_sent_back_with_other_key_order_and_spacing_is_matched(tok):
    """Frameworks re-serialize the arguments (the Agents SDK keeps the string; others dump the parsed object with
    their own spacing and key order): the call still matches the turn, and the model's raw text stands for it."""
    rec = Recorder(tok)
    user = [{"role": "user", "content": "hi"}]
    rec.prompt(render(tok, user))
    raw = '<tool_call>{"name":"calc","arguments":{"a":1,"b":2}}</tool_call>'
    returned = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"a": 1, "b": 2}'}}]}
    rec.record(ids(tok, raw) + [tok.eos_token_id], [-1.0] * (len(ids(tok, raw)) + 1), returned, raw)
    sent = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": {"b": 2, "a": 1}}}]}
    assert rec.raw_history(user + [sent])[1] == {"role": "assistant", "content": raw}
    other = {**sent, "tool_calls": [{**sent["tool_calls"][0], "function": {"name": "calc", "arguments": {"a": 2}}}]}
    assert rec.raw_history(user + [other])[1] is other  # different arguments: not the model's turn
