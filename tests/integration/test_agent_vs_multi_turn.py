"""The calculator task two ways with the same weights, seed and sampling (T=1): the built-in multi-turn rollout
(rollout.multi_turn, examples/tool_calc/tools.yaml) and examples/agent_calc/agent.py through the agent proxy. They
sample the same tokens: every row's prompt, response tokens and reward are equal. The one difference is the
end-of-turn token the model writes after a tool call: the built-in loop ends the turn at </tool_call> and carries
that token with the tool turn (response_mask 0, rollout/multi_turn.ChatDelta), the proxy returns the completion the
engine generated up to its end-of-turn token, which is part of it (mask 1). Why the tokens are the same: agent
(row, j) keeps sample j's identity (rollout/keyed.py), the source makes max_turns engine calls per step as the
built-in loop makes max_assistant_turns, the agent wraps tool results as ChatDelta does for a ChatML template, and
both render the prompt with the same template (it ignores the tool schemas)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.data.arithmetic import to_row
from hybridrl.models.loading import load_tokenizer
from hybridrl.trainer.build import build_run

pytest.importorskip("openai", reason="the agent drives the proxy with the openai package")
sys.path.insert(0, str(Path(__file__).parent))
from agent_helpers import CALC_ROWS, mask_runs, one_thread, tool_model  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
N = 4


def calc_agent():
    spec = importlib.util.spec_from_file_location("agent_calc", REPO / "examples" / "agent_calc" / "agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.agent


def first_batch(model: str, data: str, run_dir: Path, extra: list[str], agent=None):
    """Step 1's scored batch of a run (nothing trained)."""
    cfg = load_config(RLConfig, None, [
        f"actor_rollout_ref.model.path={model}", f"data.train_files=[{data}]", "data.val_files=[]",
        f"data.train_batch_size={len(CALC_ROWS) + 1}", f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={len(CALC_ROWS) + 1}", "data.max_prompt_length=64",
        "data.max_response_length=160", "trainer.val_before_train=false", "trainer.test_freq=0",
        "trainer.logger=[file]", "trainer.save_freq=0", f"trainer.default_local_dir={run_dir}", *extra])
    run = build_run(resolve(cfg), log=lambda *_: None, agent=agent)
    run.source.start(1)
    try:
        return run.source.next_batch(1, {})
    finally:
        run.source.close()
        run.close()


def test_the_calculator_agent_samples_what_the_built_in_multi_turn_rollout_samples(random_model_dir, tmp_path):
    with one_thread():
        model = tool_model(random_model_dir, str(tmp_path / "model"))
        rows = [to_row(expr, eval(expr), "train", i) for i, (expr, _, _) in enumerate(CALC_ROWS)]
        rows.append(to_row("1234+4321", 5555, "train", len(rows)))
        pq.write_table(pa.Table.from_pylist(rows), data := str(tmp_path / "train.parquet"))
        tools = str(REPO / "examples" / "tool_calc" / "tools.yaml")
        built_in = first_batch(model, data, tmp_path / "built-in", [
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}"])
        proxy = first_batch(model, data, tmp_path / "agent", ["actor_rollout_ref.rollout.agent.max_turns=2"],
                            agent=calc_agent())
    a, b = built_in.rollout, proxy.rollout
    eos = load_tokenizer(model).eos_token_id  # <|im_end|>
    assert len(a.uid) == len(b.uid) == len(rows) * N
    with_call = 0
    for i in range(len(a.uid)):
        real_a, real_b = a.response_attention()[i].bool(), b.response_attention()[i].bool()
        assert a.prompts.input_ids[i][a.prompts.attention_mask[i].bool()].tolist() == \
            b.prompts.input_ids[i][b.prompts.attention_mask[i].bool()].tolist()
        tokens = a.response_ids[i][real_a].tolist()
        assert tokens == b.response_ids[i][real_b].tolist(), f"row {i}: the two paths sampled different tokens"
        mask_a, mask_b = a.response_mask[i][real_a].tolist(), b.response_mask[i][real_b].tolist()
        # the only difference: the end-of-turn token after each call, mask 0 built-in (tool turn), 1 through the proxy
        turns_a = mask_runs(mask_a)
        calls = [end for _, end in turns_a[:-1]]  # every turn but the last ended in a call
        assert [j for j, (x, y) in enumerate(zip(mask_a, mask_b)) if x != y] == calls, f"row {i}"
        assert all(tokens[j] == eos for j in calls)
        with_call += bool(calls)
        assert mask_runs(mask_b) == [(s, e + 1 if e in calls else e) for s, e in turns_a]
    assert with_call >= len(a.uid) // 2  # the fixture model calls the tool: the second turns are compared too
    assert built_in.reward.scores.tolist() == proxy.reward.scores.tolist()
    assert 0 < float(proxy.reward.scores.sum()) < len(a.uid)  # right and wrong answers alike
