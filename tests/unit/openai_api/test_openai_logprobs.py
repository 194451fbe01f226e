"""Log-probs written as OpenAI writes them: the legacy completions object and chat's content list, by hand."""

from hybridrl.openai_api.logprobs import TokenLogprob, chat_logprobs, legacy_logprobs


def test_legacy_shape_by_hand():
    """Two prompt tokens (the first has no log-prob) and one generated token after a 4-character prompt text."""
    prompt = [TokenLogprob("ab", None), TokenLogprob("c", -0.5, (("d", -0.25),))]
    body = legacy_logprobs(prompt)
    assert body == {"tokens": ["ab", "c"], "token_logprobs": [None, -0.5],
                    "top_logprobs": [None, {"c": -0.5, "d": -0.25}], "text_offset": [0, 2]}
    assert legacy_logprobs([TokenLogprob("e", -1.0)], offset=4)["text_offset"] == [4]


def test_chat_shape_by_hand():
    """'é' is two UTF-8 bytes; top_logprobs holds exactly the top k (here 1)."""
    body = chat_logprobs([TokenLogprob("é", -0.75, (("x", -0.5),))])
    assert body == {"content": [{"token": "é", "logprob": -0.75, "bytes": [195, 169],
                                 "top_logprobs": [{"token": "x", "logprob": -0.5, "bytes": [120]}]}]}
