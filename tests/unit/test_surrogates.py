"""Lone surrogates (half of a UTF-16 pair, as json.loads returns "\\ud83d"): found with the path of their
field, described for error messages, and replaced in tool answers."""

from __future__ import annotations

import json

import pytest

from hybridrl.surrogates import (LoneSurrogate, escaped, find_lone_surrogate, lone_surrogate_problem,
                                 replace_lone_surrogates)

CUT_EMOJI = json.loads('"I like \\ud83d"')  # what a client sends when it cuts "I like 😀" after one UTF-16 unit


def test_a_cut_emoji_from_json_is_a_lone_surrogate_at_its_character():
    assert CUT_EMOJI == "I like \ud83d"
    assert find_lone_surrogate(CUT_EMOJI) == LoneSurrogate("", 7, 0xD83D)


@pytest.mark.parametrize("char, lone", [("\ud800", True), ("\udfff", True), ("\udc00", True),
                                        ("\ud7ff", False), ("\ue000", False), ("\U0001f600", False)])
def test_only_the_surrogate_range_counts(char, lone):
    """U+D800..U+DFFF; its neighbours and a whole emoji (one code point in a Python str) are fine."""
    assert (find_lone_surrogate(f"a{char}b") is not None) == lone


def test_a_whole_pair_from_json_is_one_character_not_a_surrogate():
    assert find_lone_surrogate(json.loads('"\\ud83d\\ude00"')) is None


def test_the_field_path_names_list_items_and_dict_keys():
    row = {"data_source": "x", "prompt": [{"role": "user", "content": "ok"}, {"role": "user", "content": CUT_EMOJI}]}
    assert find_lone_surrogate(row) == LoneSurrogate("prompt[1].content", 7, 0xD83D)
    assert find_lone_surrogate({"extra_info": {"tags": ("a", "\udfff")}}) == LoneSurrogate("extra_info.tags[1]", 0,
                                                                                          0xDFFF)
    assert find_lone_surrogate([{"text": "\ud800"}], "messages") == LoneSurrogate("messages[0].text", 0, 0xD800)


def test_the_first_in_document_order_is_reported():
    body = {"a": ["ok", "x\ud801"], "b": "\ud802"}
    assert find_lone_surrogate(body).field == "a[1]"


def test_a_key_holding_one_is_named_with_the_surrogate_escaped():
    """The path is printed in errors and sent in JSON: it must itself be valid text."""
    found = find_lone_surrogate({"ok": 1, "ba\ud83dd": 2})
    assert found == LoneSurrogate("ba\\ud83dd", 2, 0xD83D)
    assert escaped("x\udc80") == "x\\udc80" and escaped("plain") == "plain"


def test_non_text_values_and_whole_text_are_none():
    assert find_lone_surrogate({"n": 1, "f": 2.5, "b": True, "z": None, "s": "héllo 😀"}) is None


def test_deep_nesting_does_not_exhaust_the_stack():
    deep = inner = []
    for _ in range(5000):  # past Python's recursion limit
        inner.append([])
        inner = inner[0]
    inner.append("\ud83d")
    assert find_lone_surrogate(deep).field == "[0]" * 5000 + "[0]"


def test_the_row_problem_names_the_field_the_character_and_the_fix():
    problem = lone_surrogate_problem({"prompt": [{"role": "user", "content": CUT_EMOJI}]})
    assert problem == ("field 'prompt[0].content' holds a lone surrogate \\ud83d at character 7 (half of a UTF-16 "
                       "pair, left when text is cut inside an emoji or another character beyond U+FFFF); it has no "
                       "UTF-8 form, so no tokenizer can read it; restore the whole character or delete it")
    assert lone_surrogate_problem({"prompt": [{"role": "user", "content": "fine"}]}) is None


def test_replacement_gives_text_that_encodes():
    text = replace_lone_surrogates("a\ud83db\udfffc😀")
    assert text == "a\ufffdb\ufffdc😀"
    assert text.encode("utf-8").decode("utf-8") == text
