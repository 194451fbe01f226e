"""Log-probs: completions `logprobs`/`echo` (the legacy shape lm-evaluation-harness reads) and chat `logprobs`/
`top_logprobs`, each equal to a plain transformers forward's log_softmax in fp32 (raw logits, no temperature)."""

from __future__ import annotations

import math

import pytest
import torch
from serve_helpers import MODEL, chat_ids
from test_serve_generation import chat, complete, events

from hybridrl.serve.logprobs import from_logits

TOL = 1e-5


@pytest.fixture(scope="module")
def direct(tiny):
    """ids -> [P, V] log_softmax of a plain forward over them (fp32): row i predicts ids[i + 1]."""
    def run(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(tiny.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return run


def test_from_logits_is_the_raw_log_softmax_with_top_k():
    # logits [0, ln 3] -> probabilities 1/4, 3/4; the chosen token 0 has log(1/4); top-1 is token 1 with log(3/4)
    raw = from_logits(torch.tensor([[0.0, math.log(3.0)]]), [0], 1)
    assert raw[0].token == 0 and abs(raw[0].logprob - math.log(0.25)) < 1e-6
    assert raw[0].top[0][0] == 1 and abs(raw[0].top[0][1] - math.log(0.75)) < 1e-6
    # k = 0: the token alone; log_softmax([0, 1])[1] = 1 - log(1 + e)
    only = from_logits(torch.tensor([[0.0, 1.0]]), [1], 0)[0]
    assert only.top == () and abs(only.logprob - (1 - math.log(1 + math.e))) < 1e-6


def test_echo_with_max_tokens_0_returns_the_prompts_log_probs(client, tiny, direct):
    prompt = "12+30="
    ids = tiny.tok(prompt)["input_ids"]
    body = complete(client, prompt=prompt, echo=True, logprobs=1, max_tokens=0, temperature=0)
    c = body["choices"][0]
    assert c["text"] == prompt and c["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    lp = c["logprobs"]
    assert lp["tokens"] == [tiny.tok.decode([i]) for i in ids] and lp["text_offset"] == [0, 1, 2, 3, 4, 5]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    ref = direct(ids)
    for i in range(1, len(ids)):
        assert abs(lp["token_logprobs"][i] - ref[i - 1, ids[i]].item()) < TOL
        best = int(ref[i - 1].argmax())
        assert abs(lp["top_logprobs"][i][tiny.tok.decode([best])] - ref[i - 1, best].item()) < TOL


def test_lm_eval_loglikelihood_request_equals_a_direct_forward(client, tiny, direct):
    """lm-evaluation-harness's local-completions: token-id prompts (context + continuation), echo, logprobs 1,
    max_tokens 1, temperature 0; it sums token_logprobs[ctxlen:-1] and calls the continuation greedy when each
    of its log-probs equals the largest of its top_logprobs."""
    pairs = [("12+30=", "42"), ("What is", " 1")]
    encoded = [(tiny.tok(c)["input_ids"], tiny.tok(x, add_special_tokens=False)["input_ids"]) for c, x in pairs]
    body = complete(client, prompt=[c + x for c, x in encoded], echo=True, logprobs=1, max_tokens=1, temperature=0,
                    seed=1234)
    for choice, (ctx, cont) in zip(sorted(body["choices"], key=lambda c: c["index"]), encoded):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ctx) + len(cont) + 1  # the prompt's tokens, then one generated
        got = sum(lp["token_logprobs"][len(ctx):-1])
        greedy = all(t == max(top.values()) for t, top in zip(lp["token_logprobs"][len(ctx):-1],
                                                                lp["top_logprobs"][len(ctx):-1]))
        ref = direct(ctx + cont)
        want = sum(ref[len(ctx) - 1 + j, t].item() for j, t in enumerate(cont))
        want_greedy = all(int(ref[len(ctx) - 1 + j].argmax()) == t for j, t in enumerate(cont))
        assert abs(got - want) < TOL and greedy == want_greedy
        assert choice["text"].startswith(tiny.tok.decode(ctx + cont))


@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_generated_tokens_log_probs_are_the_raw_distribution(client, tiny, direct, temperature):
    """Temperature changes what is sampled, never the returned log-probs: log_softmax of the raw logits."""
    prompt = tiny.tok("What is")["input_ids"]
    body = complete(client, prompt="What is", logprobs=2, max_tokens=6, temperature=temperature, seed=4)
    lp, text = body["choices"][0]["logprobs"], body["choices"][0]["text"]
    assert "".join(lp["tokens"]) == text and lp["text_offset"][0] == 0
    generated = tiny.tok(text, add_special_tokens=False)["input_ids"]
    assert len(generated) >= 2  # seed 4 samples no early EOS at either temperature
    ref = direct(prompt + generated)
    for j, tok in enumerate(generated):
        assert abs(lp["token_logprobs"][j] - ref[len(prompt) - 1 + j, tok].item()) < TOL
        assert len(lp["top_logprobs"][j]) in (2, 3)  # the top 2, and the token when it is not among them


def test_chat_log_probs_and_their_stream(client, tiny, direct):
    messages = [{"role": "user", "content": "What is 12+30?"}]
    kw = dict(messages=messages, logprobs=True, top_logprobs=3, max_tokens=8, temperature=1.0, seed=11)
    whole = chat(client, **kw)["choices"][0]
    content = whole["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == whole["message"]["content"]
    prompt = chat_ids(tiny.tok, messages)
    ref = direct(prompt + tiny.tok(whole["message"]["content"], add_special_tokens=False)["input_ids"])
    for j, e in enumerate(content):
        row = ref[len(prompt) - 1 + j]
        assert len(e["top_logprobs"]) == 3 and e["bytes"] == list(e["token"].encode())
        assert abs(e["top_logprobs"][0]["logprob"] - row.max().item()) < TOL
        assert abs(e["logprob"] - row[tiny.tok(e["token"], add_special_tokens=False)["input_ids"][0]].item()) < TOL
    streamed = [e for ev in events(client, "/v1/chat/completions", kw) for ch in ev["choices"]
                if ch["logprobs"] for e in ch["logprobs"]["content"]]
    assert streamed == content


def test_no_log_probs_unless_asked(client):
    assert complete(client, prompt="What is", max_tokens=2)["choices"][0]["logprobs"] is None
    assert chat(client, messages=[{"role": "user", "content": "x"}], max_tokens=2,
                logprobs=False)["choices"][0]["logprobs"] is None
    echoed = complete(client, prompt="12+", echo=True, max_tokens=2)["choices"][0]
    assert echoed["text"].startswith("12+") and echoed["logprobs"] is None
