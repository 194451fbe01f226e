"""Shared by the agent-proxy tests (test_agent_*.py): a tiny tool-calling model, a real engine call over it, and
the proxy app served by uvicorn on 127.0.0.1 in a thread.

The tool-calling model is conftest's random 32-wide model (the project's tokenizer) after a quick `hybridrl sft`
(trainer/sft.py's run_sft: 100 full-batch steps, ~1.5 s on one thread) on the few conversations below, which it
then reproduces greedily (the tests check its answers): a Hermes call `<tool_call>{"name":"calculator", ...}
</tool_call>`, then, after the tool's message, the answer. No bundled model writes tool calls by itself; the bundled
tiny-arith took 28 s for 100 such steps here and still got one call wrong, the 32-wide model learns them all.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from hybridrl.rollout.agent.batcher import Batcher
from hybridrl.rollout.agent.proxy import AgentLimits, build_app
from hybridrl.rollout.agent.recorder import Recorder

# Compact JSON (short to learn); the proxy returns the arguments as json.dumps spaces them, so the turn an agent
# sends back renders differently from what the model wrote unless the recorder substitutes the raw text
CALL = '<tool_call>{"name":"calculator","arguments":{"expression":"%s"}}</tool_call>'
SDK_Q, SDK_RESULT, SDK_ANSWER = "What is 1234+4321?", "5555", "The answer is 5555."
THINK_Q, THINK_ANSWER = "Say hi", "<think>greet</think>hi"
# (question, the tool message's content, the model's final answer): the example agent wraps results as the
# built-in multi-turn rollout does; the second row's answer is forced wrong, so its reward must be 0
CALC_ROWS = [("2345+6789", "<tool_response>\n9134\n</tool_response>", "9134"),
             ("1111+2222", "<tool_response>\n3333\n</tool_response>", "3334")]


@contextlib.contextmanager
def one_thread():
    """torch on one thread: a 32-wide model gains nothing from two, and on a loaded machine two threads waiting on
    each other made an SFT step 0.9 s instead of 0.013 s (measured here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def conversations() -> list[tuple[list[dict], str]]:
    """(messages, the assistant's next turn) pairs the fixture model learns."""
    def call_then_answer(question: str, expr: str, tool_content: str, answer: str):
        user = {"role": "user", "content": question}
        return [([user], CALL % expr),
                ([user, {"role": "assistant", "content": CALL % expr}, {"role": "tool", "content": tool_content}],
                 answer)]
    pairs = call_then_answer(SDK_Q, "1234+4321", SDK_RESULT, SDK_ANSWER)
    for expr, tool_content, answer in CALC_ROWS:
        pairs += call_then_answer(f"What is {expr}?", expr, tool_content, answer)
    return pairs + [([{"role": "user", "content": THINK_Q}], THINK_ANSWER)]


def tool_model(base: str, out: str, steps: int = 100, lr: float = 1e-2) -> str:
    """The fixture model's folder (see the module docstring): `base` fine-tuned into `out`."""
    from hybridrl.config.loader import load_config
    from hybridrl.config.sft import SFTConfig
    from hybridrl.trainer.sft import run_sft

    pairs = conversations()
    os.makedirs(out, exist_ok=True)
    data = f"{out}/sft.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": m, "response": r} for m, r in pairs]), data)
    run_sft(load_config(SFTConfig, None, [
        f"model.partial_pretrain={base}", f"data.train_files=[{data}]", "data.val_files=[]",
        "data.response_key=response", "data.max_length=200", f"data.train_batch_size={len(pairs)}",
        f"data.micro_batch_size_per_gpu={len(pairs)}", f"trainer.total_training_steps={steps}",
        f"optim.lr={lr}", "optim.lr_scheduler=constant", "optim.lr_warmup_steps=0", "trainer.logger=[file]", f"trainer.default_local_dir={out}/model"]),
        log=lambda *_: None)
    return f"{out}/model"


@dataclass
class Policy:
    """The model and tokenizer behind the proxy, and a greedy engine call in the batcher's form over `engine` (a
    RolloutEngine: vLLM's, say; None: an hf engine over `model`)."""

    model: torch.nn.Module
    tokenizer: object
    eos: list[int]
    engine: object = None

    def engine_call(self, turns: dict):
        """EngineCall (batcher.py): greedy, each row cut at its own max_new_tokens; `turns[agent]` gets each of
        its rows as (prompt ids, generated ids, log-probs)."""
        from hybridrl.rollout.base import SamplingParams
        from hybridrl.rollout.hf import HFRolloutEngine
        from hybridrl.batch import left_pad

        engine = self.engine or HFRolloutEngine(self.model.eval(), self.eos, self.tokenizer.pad_token_id)

        def call(prompts, agents, max_new):
            ids, mask = left_pad(prompts, self.tokenizer.pad_token_id, "cpu")
            params = SamplingParams(max_new_tokens=max(max_new), do_sample=False)
            out = engine.generate(ids, mask, params, torch.zeros(len(prompts), dtype=torch.int64))
            rows = []
            for i, (agent, n) in enumerate(zip(agents, max_new)):
                k = min(n, int(out.response_mask[i].sum()))
                rows.append((out.response_ids[i, :k].tolist(), out.log_probs[i, :k].tolist()))
                turns.setdefault(agent, []).append((list(prompts[i]), *rows[-1]))
            return rows
        return call


def load_policy(folder: str, chat_template: str | None = None, engine=None) -> Policy:
    from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer

    tok, model = load_tokenizer(folder), load_causal_lm(folder)
    if chat_template is not None:  # a local copy of the tokenizer with another template
        tok.chat_template = chat_template
    return Policy(model, tok, eos_token_ids(model, tok), engine)


class Rollout:
    """One rollout's proxy for `num_agents` agents served by uvicorn at 127.0.0.1 (a free port)."""

    def __init__(self, policy: Policy, num_agents: int, max_turns: int = 6, max_tokens: int = 160):
        import uvicorn

        self.turns: dict[int, list[tuple]] = {}  # per agent, its engine rows: (prompt, generated ids, log-probs)
        self.batcher = Batcher(policy.engine_call(self.turns), num_agents)
        self.recorders = [Recorder(policy.tokenizer) for _ in range(num_agents)]
        self.counts = {"turns": [0] * num_agents, "malformed_tool_calls": 0}
        app = build_app(policy.tokenizer, self.batcher, self.recorders, AgentLimits(max_turns, max_tokens),
                        self.counts)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def url(self, agent: int) -> str:
        return f"http://127.0.0.1:{self.port}/agents/{agent}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def check_token_exact(rec: Recorder, tokenizer, turns: list[tuple], texts: list[str]) -> None:
    """An agent's samples against its engine turns (`turns`: per turn, (prompt ids, generated ids, log-probs)):
    in turn order, each turn's prompt is its segment's context before the turn's generated ids, mask 1 exactly on
    those ids, with the engine's log-probs (0.0 elsewhere); the generated ids decode to the text the client got
    (`texts`: per turn, content or the call as the model wrote it, without the end-of-turn token)."""
    runs = [(seg, s, e) for seg in rec.samples() for s, e in mask_runs(seg.mask)]
    assert len(runs) == len(turns), "a turn the engine generated is missing from the samples, or one is extra"
    for (seg, s, e), (prompt, ids, lps) in zip(runs, turns):
        assert seg.context()[:len(seg.prompt_ids) + s] == prompt  # what the model saw, token for token
        assert seg.tokens[s:e] == ids and seg.log_probs[s:e] == lps and len(lps) == len(ids)
    for seg in rec.samples():
        assert len(seg.log_probs) == len(seg.tokens) == len(seg.mask)
        assert all(lp == 0.0 for lp, m in zip(seg.log_probs, seg.mask) if m == 0)
    eos = tokenizer.eos_token_id
    decoded = [tokenizer.decode(ids[:-1] if ids[-1] == eos else ids, skip_special_tokens=False) for _, ids, _ in turns]
    assert decoded == texts


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s."""
    out, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def capture(run):
    """Per step, the SourceBatch and per agent its engine turns (prompt ids, generated ids, log-probs)."""
    source, seen = run.source, {}
    make_call, next_batch = source._engine_call, source.next_batch

    def engine_call(index):
        call = make_call(index)

        def recorded(prompts, agents, max_new):
            out = call(prompts, agents, max_new)
            for p, a, (ids, lps) in zip(prompts, agents, out):
                seen["step"]["turns"].setdefault(a, []).append((list(p), ids, lps))
            return out
        return recorded

    def batch(step, m):
        seen["step"] = seen[step] = {"turns": {}}
        seen[step]["batch"] = next_batch(step, m)
        return seen[step]["batch"]

    source._engine_call, source.next_batch = engine_call, batch
    return seen


def check_row_is_token_exact(rollout, i: int, turns: list[tuple]) -> None:
    """Row i: [prompt | response] is the last turn's context plus its generated ids, mask 1 exactly on every turn's
    generated ids, with the engine's log-probs."""
    prompt = rollout.prompts.input_ids[i][rollout.prompts.attention_mask[i].bool()].tolist()
    real = rollout.response_attention()[i].bool()
    response = rollout.response_ids[i][real].tolist()
    last_prompt, last_ids, _ = turns[-1]
    assert prompt == turns[0][0] and prompt + response == last_prompt + last_ids
    expected_mask, expected_lps = [0] * len(response), [0.0] * len(response)
    for p, ids, lps in turns:
        start = len(p) - len(prompt)
        expected_mask[start:start + len(ids)], expected_lps[start:start + len(ids)] = [1] * len(ids), lps
    assert rollout.response_mask[i][real].tolist() == expected_mask
    assert rollout.rollout_log_probs[i][real].tolist() == pytest.approx(expected_lps, abs=0)
