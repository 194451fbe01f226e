"""Hermes tool-call parsing and where a model turn ends."""

from hybridrl.openai_api.hermes import end_of_first_call, parse_tool_calls


def test_parses_complete_calls_in_order():
    text = ('think <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'
            '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}</tool_call>')
    a, b = parse_tool_calls(text)
    assert (a.name, a.arguments, a.error) == ("calculator", {"expression": "1+2"}, None)
    assert (b.name, b.arguments) == ("python", {"code": "print(1)"})  # arguments sent as a JSON string


def test_no_complete_block_is_an_answer():
    assert parse_tool_calls("The answer is 5.") == []
    assert parse_tool_calls('<tool_call>{"name": "calculator"') == []


def test_malformed_blocks_say_why():
    assert "not valid JSON" in parse_tool_calls("<tool_call>{name: calc}</tool_call>")[0].error
    assert '"name"' in parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')[0].error
    bad_args = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>')[0]
    assert bad_args.name == "calculator" and bad_args.arguments is None and "JSON object" in bad_args.error
    assert parse_tool_calls('<tool_call>{"name": "c"}</tool_call>')[0].arguments == {}  # no arguments: {}


def test_end_of_first_call_counts_tokens_through_the_closing_tag():
    # one token per character (the tiny tokenizer spells the tag with many tokens)
    text = '<tool_call>{"name": "c"}</tool_call>tail'
    assert end_of_first_call(list(text)) == len(text) - len("tail")
    # a single special token for the tag (Qwen2.5) and a piece that runs past it
    assert end_of_first_call(["<tool_call>", "{}", "</tool_call>", "x"]) == 3
    assert end_of_first_call(["<tool_call>{}</tool_", "call>more"]) == 2
    assert end_of_first_call(list("no call here")) is None
    assert end_of_first_call(list("</tool_call> without an opening tag")) is None
