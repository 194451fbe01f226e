"""A generated EOS in the log-probs: completions list it (OpenAI's legacy shape and vLLM's: its text is empty),
chat does not. lm-evaluation-harness's local-completions scores a continuation as token_logprobs[ctxlen:-1], the
last entry being the one generated token; when that token is EOS and the server leaves it out, the slice drops the
continuation's last token instead (tiny-arith's multiple-choice accuracy fell from 0.75 to 0.06 that way)."""

from __future__ import annotations

import torch
from serve_helpers import chat_ids
from test_serve_generation import chat, complete

TOL = 1e-5
QUESTION = [{"role": "user", "content": "What is 23+45?"}]


def test_a_generated_eos_has_its_entry_in_completions_log_probs(client, tiny):
    answer = chat(client, messages=QUESTION, max_tokens=8, temperature=0)["choices"][0]
    assert answer["finish_reason"] == "stop"  # tiny-arith answers, then its EOS (<|im_end|>)
    ids = chat_ids(tiny.tok, QUESTION) + tiny.tok(answer["message"]["content"], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        last = torch.log_softmax(tiny.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)  # [V]
    eos = int(last.argmax())
    assert eos in tiny.eos  # greedy, the one generated token is EOS

    c = complete(client, prompt=ids, echo=True, logprobs=1, max_tokens=1, temperature=0)["choices"][0]
    lp = c["logprobs"]
    assert c["finish_reason"] == "stop" and len(lp["token_logprobs"]) == len(ids) + 1  # the prompt, then EOS
    assert lp["tokens"][-1] == tiny.tok.decode([eos]) and abs(lp["token_logprobs"][-1] - last[eos].item()) < TOL
    assert lp["top_logprobs"][-1] == {lp["tokens"][-1]: lp["token_logprobs"][-1]}  # greedy: it is its own top 1
    assert not c["text"].endswith(lp["tokens"][-1])  # the text never shows it

    # without echo: the one generated entry
    only = complete(client, prompt=ids, logprobs=0, max_tokens=1, temperature=0)["choices"][0]
    assert only["text"] == "" and only["logprobs"]["tokens"] == [lp["tokens"][-1]]


def test_chat_log_probs_list_the_visible_tokens_only(client):
    c = chat(client, messages=QUESTION, max_tokens=8, temperature=0, logprobs=True)["choices"][0]
    assert c["finish_reason"] == "stop"
    assert "".join(e["token"] for e in c["logprobs"]["content"]) == c["message"]["content"] != ""
