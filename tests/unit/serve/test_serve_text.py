"""Incremental detokenization and stop strings (serve/text.py), and how a Job ends (serve/jobs.py)."""

from __future__ import annotations

import pytest

from hybridrl.serve.jobs import Delta, Job, Sampling, choice_keys, to_int64
from hybridrl.serve.text import REPLACEMENT, TextStream, first_stop, partial_stop_len


def utf8(ids: list[int]) -> str:
    """A byte-level 'tokenizer': token id = one byte."""
    return bytes(ids).decode("utf-8", errors="replace")


def feed(stream: TextStream, tokens) -> list[str]:
    return [stream.push([t]) for t in tokens]


def test_multibyte_characters_are_emitted_whole_and_only_once_complete():
    text = "a日é本"  # 1 + 3 + 2 + 3 bytes
    stream = TextStream(utf8)
    pieces = feed(stream, list(text.encode()))
    # a byte that does not complete a character emits nothing; the completing byte emits the character
    assert pieces == ["a", "", "", "日", "", "é", "", "", "本"]
    assert stream.finish() == "" and stream.text == text


def test_a_real_byte_level_tokenizer_streams_without_replacement_characters(tiny):
    text = "héllo 日本 What is 12+30?"
    ids = tiny.tok(text, add_special_tokens=False)["input_ids"]
    decode = lambda ids: tiny.tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    assert REPLACEMENT in decode(ids[:2])  # the tokenizer does split 'é' (else this test proves nothing)
    stream = TextStream(decode)
    pieces = feed(stream, ids)
    assert all(REPLACEMENT not in p for p in pieces)
    assert "".join(pieces) + stream.finish() == text


def test_an_incomplete_sequence_at_the_end_is_released_by_finish():
    stream = TextStream(utf8)
    assert feed(stream, [ord("x"), 0xE6]) == ["x", ""]  # 0xE6 starts a 3-byte character that never completes
    assert stream.finish() == REPLACEMENT  # the non-streamed text has it too: the two always agree
    assert stream.text == utf8([ord("x"), 0xE6])


def chunks(*parts: str):
    """decode for tokens that are whole strings: token i is parts[i]."""
    return (lambda ids: "".join(parts[i] for i in ids)), list(range(len(parts)))


def test_a_stop_string_split_across_tokens_truncates_and_is_never_sent():
    decode, ids = chunks("He", "llo", " wo", "rld")
    stream = TextStream(decode, ["lo w"])
    # "Hello" ends with "lo", a prefix of the stop string: held back until " wo" decides it
    assert feed(stream, ids[:3]) == ["He", "l", ""]
    assert stream.stopped and stream.text == "Hel"
    assert stream.push([ids[3]]) == "" and stream.finish() == ""  # nothing after the stop


def test_a_held_back_prefix_that_does_not_complete_is_sent():
    decode, ids = chunks("ab", "c", "x", "c")
    stream = TextStream(decode, ["cd"])
    assert feed(stream, ids) == ["ab", "", "cx", ""]  # "c" waits; "cx" is no stop; the last "c" waits again
    assert stream.finish() == "c" and stream.text == "abcxc" and not stream.stopped


def test_the_earliest_of_several_stop_strings_wins():
    decode, ids = chunks("one two three")
    stream = TextStream(decode, ["three", "two", "o t"])
    assert stream.push(ids) == "one " and stream.stopped  # "two" at 4 comes before "o t" (6) and "three" (8)


@pytest.mark.parametrize("text, stops, expected", [
    ("abc", ["x"], None), ("abcabc", ["ca", "bc"], 1), ("", ["a"], None), ("a.b", ["."], 1)])
def test_first_stop(text, stops, expected):
    assert first_stop(text, stops) == expected


@pytest.mark.parametrize("text, stops, expected", [
    ("hello", ["lo!"], 2),  # "lo" may become "lo!"
    ("hello", ["hello"], 0),  # a whole stop string is not a *proper* prefix (first_stop finds it)
    ("xab", ["abc", "bd"], 2),  # the longest candidate: "ab" (also "b" for "bd")
    ("abc", ["z"], 0)])
def test_partial_stop_len(text, stops, expected):
    assert partial_stop_len(text, stops) == expected


def make_job(decode, eos=(99,), max_tokens=10, stops=()):
    events: list[Delta] = []
    job = Job(0, [1], Sampling(), max_tokens, 0, TextStream(decode, stops), frozenset(eos), events.append)
    return job, events


def test_job_ends_on_eos_without_its_text_and_counts_it():
    job, events = make_job(lambda ids: "".join(chr(ord("a") + i) for i in ids if i != 99))
    assert not job.push([0]) and job.push([1, 99, 2])  # tokens after EOS are ignored
    assert [(e.text, e.finish_reason, e.completion_tokens) for e in events] == [("a", None, 1), ("b", "stop", 3)]
    assert job.tokens == [0, 1, 99]
    assert job.push([3]) and len(events) == 2  # a finished job ends its request once


def test_job_ends_at_max_tokens_with_length_and_releases_held_text():
    job, events = make_job(lambda ids: "".join("ab"[i] for i in ids), max_tokens=2, stops=["bz"])
    job.push([0])
    assert job.push([1])  # "ab": "b" is held back (could start "bz") until the length limit ends the job
    assert [(e.text, e.finish_reason) for e in events] == [("a", None), ("b", "length")]


def test_choice_keys_depend_on_seed_and_index_only():
    assert choice_keys(7, 3) == choice_keys(7, 5)[:3]  # choice i's key does not depend on n
    assert len(set(choice_keys(7, 4) + choice_keys(8, 4))) == 8
    assert to_int64(2 ** 64 - 1) == -1 and to_int64(-5) == -5 and to_int64(2 ** 70 + 3) == 3
