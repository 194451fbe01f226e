"""Token bookkeeping of multi-turn rollouts: the trained tokens are the generated ones, in order,
with the tool turns between them; masks, log-probs, budgets, turn limits and counters."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hybridrl.batch import PromptBatch
from hybridrl.models.forward import response_log_probs
from hybridrl.rollout.base import Generation, RolloutEngine, SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.rollout.keyed import KeyedDraws
from hybridrl.rollout.multi_turn import ChatDelta, MultiTurnEngine, MultiTurnSettings
from hybridrl.rollout.tools.base import Tool, function_schema
from hybridrl.rollout.tools.calculator import Calculator

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1234+5678"}}</tool_call>'


class ScriptedEngine(RolloutEngine):
    """Returns scripted texts script[turn][prompt row] as tokens (+ EOS); log-probs from `module` on the given context
    when one is set (else -1.0 each), so they can be compared with the trainer's recomputation."""

    def __init__(self, tokenizer, script: list[list[str]], module=None):
        self.tok, self.script, self.module = tokenizer, script, module
        self.draws, self.contexts, self.outputs = KeyedDraws(0), [], []

    def load_weights(self, named_tensors):
        pass

    def generate(self, prompt_ids, prompt_mask, sampling, sample_ids, stream="train"):
        call = self.draws.calls[stream]
        self.draws.skip(stream)
        rows = [self.tok(self.script[call][int(s) >> 20], add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                for s in sample_ids]
        rows = [r[:sampling.max_new_tokens] for r in rows]
        T = max(len(r) for r in rows)
        ids = torch.full((len(rows), T), self.tok.pad_token_id)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
        self.contexts.append([p[m.bool()].tolist() for p, m in zip(prompt_ids, prompt_mask)])
        self.outputs.append(rows)
        lp = -torch.ones(ids.shape) * mask
        if self.module is not None:
            from hybridrl.batch import Sequences
            seqs = Sequences(torch.cat([prompt_ids, ids], 1), torch.cat([prompt_mask, mask], 1), mask)
            with torch.no_grad():
                lp = response_log_probs(self.module, seqs)[0]
        return Generation(ids, mask, lp)


def _prompts(tok, n_rows: int) -> PromptBatch:
    from hybridrl.data.dataset import encode_prompts

    ids = encode_prompts(tok, [[{"role": "user", "content": f"What is {i}+1?"}] for i in range(n_rows)])
    L = max(len(x) for x in ids)
    input_ids = torch.tensor([[tok.pad_token_id] * (L - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (L - len(x)) + [1] * len(x) for x in ids])
    return PromptBatch(input_ids, mask, ["arithmetic"] * n_rows, ["0"] * n_rows, list(range(n_rows)))


def _engine(tok, script, module=None, turns=3, budget=400):
    inner = ScriptedEngine(tok, script, module)
    mt = MultiTurnEngine(inner, tok, {"calculator": Calculator()}, MultiTurnSettings(turns, 256))
    return inner, mt, SamplingParams(max_new_tokens=budget)


def test_chat_delta_matches_the_chat_template(random_model_dir):
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    delta = ChatDelta(tok)
    text = tok.decode(delta.tool_turn("6912"))
    assert text == "<|im_end|>\n<|im_start|>tool\n<tool_response>\n6912\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_trained_tokens_are_the_generated_tokens_with_tool_turns_between(random_model_dir):
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    # row 0: a call (followed by junk the cut drops), then the answer; row 1 answers at once
    script = [[CALL + "junk", "6912"], ["7", "unused"], ["unused", "unused"]]
    inner, mt, sampling = _engine(tok, script)
    prompts = _prompts(tok, 2)
    rollout = generate_rollout(mt, prompts, 1, sampling)
    call_ids = tok(CALL, add_special_tokens=False)["input_ids"]
    tool = ChatDelta(tok).tool_turn("6912")
    answer = inner.outputs[1][0]  # the second turn's tokens as generated (EOS included)
    n0 = len(call_ids) + len(tool) + len(answer)
    assert rollout.response_ids[0, :n0].tolist() == call_ids + tool + answer
    assert rollout.response_mask[0, :n0].tolist() == [1] * len(call_ids) + [0] * len(tool) + [1] * len(answer)
    assert rollout.response_attention()[0].sum() == n0 and rollout.response_mask[0, n0:].sum() == 0
    # the model tokens, in order, are exactly what the engine sampled (up to the first </tool_call>)
    model_tokens = rollout.response_ids[0][rollout.response_mask[0].bool()].tolist()
    assert model_tokens == inner.outputs[0][0][:len(call_ids)] + answer
    # log-probs: the engine's on model tokens, 0 on tool tokens
    assert (rollout.rollout_log_probs[0, len(call_ids):len(call_ids) + len(tool)] == 0).all()
    assert (rollout.rollout_log_probs[0][rollout.response_mask[0].bool()] == -1).all()
    # the second turn's prompt is the first conversation so far, token for token (no re-tokenizing)
    assert inner.contexts[1][0] == prompts.input_ids[0][prompts.attention_mask[0].bool()].tolist() + call_ids + tool
    # row 1 answered in one turn; turn 3 had nothing to generate but was still counted (keyed draws)
    assert rollout.response_ids[1][rollout.response_mask[1].bool()].tolist() == inner.outputs[0][1]
    assert len(inner.outputs) == 2 and inner.draws.calls["train"] == 3
    s = rollout.turn_stats
    assert s["num_turns"].tolist() == [2.0, 1.0] and s["tool_call_counts/calculator"].tolist() == [1.0, 0.0]


class Echo(Tool):
    """Answers with its argument, as many user tools quote what they were given."""

    default_schema = function_schema("echo", "repeats the text", "text", "the text")

    def call(self, arguments: dict) -> str:
        return f"you said: {arguments['text']}"


def test_a_lone_surrogate_in_a_tool_answer_is_read_as_the_replacement_character(random_model_dir):
    """The model may write half of an emoji as a JSON escape in its call; a tool that echoes it used to stop the run
    with the tokenizer's TypeError. The tool turn holds U+FFFD instead, as undecodable sandbox output does."""
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    call = '<tool_call>{"name": "echo", "arguments": {"text": "hi \\ud83d"}}</tool_call>'
    inner = ScriptedEngine(tok, [[call], ["done"]])
    mt = MultiTurnEngine(inner, tok, {"echo": Echo()}, MultiTurnSettings(2, 256))
    rollout = generate_rollout(mt, _prompts(tok, 1), 1, SamplingParams(max_new_tokens=400))
    call_ids = tok(call, add_special_tokens=False)["input_ids"]
    tool = ChatDelta(tok).tool_turn("you said: hi \ufffd")
    assert rollout.response_ids[0, len(call_ids):len(call_ids) + len(tool)].tolist() == tool
    assert ChatDelta(tok).tool_turn("a\udfffb") == ChatDelta(tok).tool_turn("a\ufffdb")


def test_malformed_unknown_and_failing_calls_become_error_messages(random_model_dir):
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    script = [['<tool_call>{"name": calculator}</tool_call>', '<tool_call>{"name": "web", "arguments": {}}</tool_call>',
               '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>'],
              ["a", "b", "c"]]
    inner, mt, sampling = _engine(tok, script, turns=2)
    rollout = generate_rollout(mt, _prompts(tok, 3), 1, sampling)
    texts = [tok.decode(ids[a.bool() & ~m.bool()]) for ids, a, m in
             zip(rollout.response_ids, rollout.response_attention(), rollout.response_mask)]
    assert "not valid JSON" in texts[0] and "unknown tool 'web'" in texts[1] and "division by zero" in texts[2]
    s = rollout.turn_stats
    assert s["tool_errors/malformed"].tolist() == [1, 0, 0] and s["tool_errors/unknown_tool"].tolist() == [0, 1, 0]
    assert s["tool_errors/bad_arguments"].tolist() == [0, 0, 1]
    assert s["tool_call_counts/calculator"].tolist() == [0, 0, 1]  # only calls that ran count
    assert s["num_turns"].tolist() == [2, 2, 2]


def test_turn_limit_and_budget_truncate_cleanly(random_model_dir):
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    call_len = len(tok(CALL, add_special_tokens=False)["input_ids"])
    tool_len = len(ChatDelta(tok).tool_turn("6912"))
    # the model calls every turn: with 2 turns the second call is not run and the response ends with it
    inner, mt, sampling = _engine(tok, [[CALL], [CALL], [CALL]], turns=2)
    r = generate_rollout(mt, _prompts(tok, 1), 1, sampling)
    assert r.response_mask[0].tolist() == [1] * call_len + [0] * tool_len + [1] * call_len
    assert r.turn_stats["tool_call_counts/calculator"].tolist() == [1]
    # a budget with no room for the tool turn: the response is the call alone, nothing half-appended
    inner, mt, sampling = _engine(tok, [[CALL], [CALL]], turns=3, budget=call_len + tool_len)
    r = generate_rollout(mt, _prompts(tok, 1), 1, sampling)
    assert r.response_mask.shape[1] == call_len and r.response_mask.sum() == call_len
    # a budget that cuts the second model turn: total length is the budget exactly
    budget = call_len + tool_len + 5
    inner, mt, sampling = _engine(tok, [[CALL], ["123456789"]], turns=3, budget=budget)
    r = generate_rollout(mt, _prompts(tok, 1), 1, sampling)
    assert r.response_attention().sum() == budget and r.response_mask[0, -5:].tolist() == [1] * 5


def test_trainer_log_probs_see_tool_tokens_as_context(random_model_dir):
    """The engine's log-probs (computed with the tool tokens in its prompt) equal the trainer's
    recomputation over prompt + response, on model tokens; tool tokens are excluded."""
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    model = AutoModelForCausalLM.from_pretrained(random_model_dir).eval()
    inner, mt, sampling = _engine(tok, [[CALL, "5"], ["6912", "7"], ["-", "-"]], module=model)
    rollout = generate_rollout(mt, _prompts(tok, 2), 1, sampling)
    with torch.no_grad():
        lp, _ = response_log_probs(model, rollout.sequences())
    mask = rollout.response_mask.bool()
    assert torch.allclose(lp[mask], rollout.rollout_log_probs[mask], atol=1e-5)
    assert (lp[~mask] == 0).all()
    # without the tool tokens in the attention mask the second turn's log-probs would differ
    seqs = rollout.sequences()
    seqs.attention_mask[:, -mask.shape[1]:] = rollout.response_mask
    with torch.no_grad():
        wrong, _ = response_log_probs(model, seqs)
    assert not torch.allclose(wrong[mask], rollout.rollout_log_probs[mask], atol=1e-3)


def test_hf_engine_without_tool_calls_samples_what_single_turn_samples(random_model_dir):
    tok = AutoTokenizer.from_pretrained(random_model_dir)
    model = AutoModelForCausalLM.from_pretrained(random_model_dir).eval()
    prompts, sampling = _prompts(tok, 3), SamplingParams(max_new_tokens=12)
    plain = generate_rollout(HFRolloutEngine(model, [tok.eos_token_id], tok.pad_token_id, seed=3), prompts, 2, sampling)
    hf = HFRolloutEngine(model, [tok.eos_token_id], tok.pad_token_id, seed=3)
    mt = MultiTurnEngine(hf, tok, {"calculator": Calculator()}, MultiTurnSettings(3, 256))
    multi = generate_rollout(mt, prompts, 2, sampling)
    assert torch.equal(multi.response_mask, plain.response_mask)
    assert torch.equal(multi.response_ids * plain.response_mask, plain.response_ids * plain.response_mask)
    assert torch.allclose(multi.rollout_log_probs, plain.rollout_log_probs)
    assert hf.draws.calls["train"] == 3  # one call per allowed turn, whatever happened
    mt.skip()
    assert hf.draws.calls["train"] == 6
