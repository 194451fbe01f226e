"""Token-exact records on a real (tiny) model for an append-only chat template (the model's own ChatML: one sample,
every turn) and one that rewrites history (earlier assistant turns lose their <think> block, as Qwen3's template
does: one sample per rewrite, each exactly what the model saw at its turns), driven by the openai client; with the
hf engine and with vLLM's (skipped where vLLM is not installed), whose log-probs must also be the trainer's."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import torch

openai = pytest.importorskip("openai", reason="the agent proxy tests drive it with the openai package")
pytestmark = pytest.mark.slow  # each module fine-tunes the fixture model (~2 s) and starts uvicorn
sys.path.insert(0, str(Path(__file__).parent))
from agent_helpers import (THINK_ANSWER, THINK_Q, Rollout, check_token_exact, load_policy, mask_runs,  # noqa: E402
                           one_thread, tool_model)

# earlier assistant turns keep only what follows </think> (Qwen3's rule, in short)
DROP_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
              "{% if m['role'] == 'assistant' %}{{ m['content'].split('</think>')[-1] }}"
              "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A 2-layer, 64-wide random model (one head of 64: vLLM's CPU attention has no kernel for conftest's 16-wide
    heads) with the project's tokenizer, fine-tuned on agent_helpers' conversations."""
    from hybridrl.models.tiny import build_model, build_tokenizer

    base = str(tmp_path_factory.mktemp("random-64"))
    tok = build_tokenizer()
    build_model(tok, hidden=64, layers=2, heads=1, intermediate=128, seed=0).save_pretrained(base)
    tok.save_pretrained(base)
    with one_thread():
        yield tool_model(base, str(tmp_path_factory.mktemp("agent-templates")))


@pytest.fixture(scope="module", params=["hf", "vllm"])
def engine(request, model_dir):
    """None: the hf engine over the model (agent_helpers.Policy); else vLLM's over the same folder."""
    if request.param == "hf":
        yield None
        return
    pytest.importorskip("vllm")
    from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
    from hybridrl.rollout.vllm import VLLMRolloutEngine, VLLMSettings

    tok, model = load_tokenizer(model_dir), load_causal_lm(model_dir)
    vllm = VLLMRolloutEngine(VLLMSettings(model_dir, max_model_len=256, max_num_seqs=8, cpu_kv_cache_gb=0.25),
                             eos_token_ids(model, tok), tok.pad_token_id, model.state_dict(), seed=0)
    yield vllm
    vllm.close()


def trainer_log_probs_match(policy, rec) -> None:
    """With vLLM, the log-probs recorded on each generated token are the trainer's (fp32 both sides), recomputed
    on the sample as the trainer will see it: the sample is what the model was conditioned on."""
    if policy.engine is None:
        return  # hf: the engine is the trainer's module
    from hybridrl.batch import Sequences
    from hybridrl.models.forward import batched_log_probs

    for seg in rec.samples():
        ids = torch.tensor([seg.context()])
        seqs = Sequences(ids, torch.ones_like(ids), torch.tensor([seg.mask]))
        ours = batched_log_probs(policy.model.eval(), seqs, 1.0, 64)[0]
        mask = torch.tensor(seg.mask, dtype=torch.bool)
        assert float((ours[mask] - torch.tensor(seg.log_probs)[mask]).abs().max()) < 1e-4


def three_turns(policy) -> tuple[Rollout, list[str]]:
    """THINK_Q, then two more user turns; (the rollout, the texts the client received)."""
    rollout = Rollout(policy, 1)
    client = openai.AsyncOpenAI(base_url=rollout.url(0), api_key="none", max_retries=0, timeout=60)

    async def main():
        messages, texts = [], []
        for ask in (THINK_Q, "Again", "More"):
            messages.append({"role": "user", "content": ask})
            r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=24)
            texts.append(r.choices[0].message.content)
            messages.append({"role": "assistant", "content": texts[-1]})
        return texts

    try:
        with one_thread():
            texts = asyncio.run(main())
        rollout.batcher.leave(0)
    finally:
        rollout.close()
    return rollout, texts


def test_append_only_template_gives_one_sample_with_every_turn(model_dir, engine):
    policy = load_policy(model_dir, engine=engine)
    rollout, texts = three_turns(policy)
    rec, turns = rollout.recorders[0], rollout.turns[0]
    assert texts[0] == THINK_ANSWER and len(turns) == 3
    assert len(rec.samples()) == 1 and rec.segments_dropped == 0 == rec.generated_tokens_dropped
    check_token_exact(rec, policy.tokenizer, turns, texts)
    trainer_log_probs_match(policy, rec)
    prompt, ids, _ = turns[-1]
    assert rec.sample().context() == prompt + ids


def test_a_template_that_drops_earlier_thinking_gives_one_sample_per_rewrite(model_dir, engine):
    policy = load_policy(model_dir, chat_template=DROP_THINK, engine=engine)  # a local copy of the tokenizer, another template
    rollout, texts = three_turns(policy)
    rec, turns = rollout.recorders[0], rollout.turns[0]
    assert texts[0] == THINK_ANSWER  # the first turn thinks; the second request renders it without the block
    think = policy.tokenizer.decode(policy.tokenizer("<think>greet</think>", add_special_tokens=False)["input_ids"])
    assert think not in policy.tokenizer.decode(turns[1][0])
    # a new segment at every turn whose rendering drops a block the model wrote; turns in between append
    rewrites = 1 + sum("</think>" in t for t in texts[1:-1])
    assert len(rec.samples()) == rewrites + 1 >= 2
    check_token_exact(rec, policy.tokenizer, turns, texts)  # every turn, in its segment, exactly as the model saw it
    trainer_log_probs_match(policy, rec)
    assert rec.segments_dropped == rewrites
    in_last = len(mask_runs(rec.sample().mask))  # the turns the last sample holds
    assert rec.generated_tokens_dropped == sum(len(ids) for _, ids, _ in turns[:len(turns) - in_last]) > 0
