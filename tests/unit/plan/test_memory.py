"""check_memory: a per-worker memory estimate by hand on a fake model, its refusals round-tripped, and the
activation formula held against what autograd really saves for the bundled model."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.plan.memory import (GIB, RUNTIME_BYTES, MemoryBudgetError, MemoryReport, estimate_memory, fmt_bytes,
                                    read_model_dims)
from hybridrl.plan.memory_fixes import check_memory
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError
from hybridrl.models.loading import resolve_model_path
from saved_activations import SavedActivations


@pytest.fixture(scope="module")
def fake_model(tmp_path_factory) -> str:
    """A Qwen2-shaped folder: hidden 8, 2 layers, 2 heads of 4 with 1 KV head, MLP 16, vocab 32, tied head.

    Parameters: embeddings 32·8 = 256; per layer q 8·8 = 64, k 4·8 = 32, v 32, o 64, gate 16·8 = 128, up 128,
    down 128, two norms 8 + 8 -> 592; final norm 8. Total 256 + 2·592 + 8 = 1448."""
    from safetensors.torch import save_file

    out = tmp_path_factory.mktemp("fake-model")
    config = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=8, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=4, intermediate_size=16, vocab_size=32,
                  tie_word_embeddings=True)
    (out / "config.json").write_text(json.dumps(config))
    shapes = {"model.embed_tokens.weight": (32, 8), "model.norm.weight": (8,)}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (8, 8), p + "self_attn.k_proj.weight": (4, 8),
                       p + "self_attn.v_proj.weight": (4, 8), p + "self_attn.o_proj.weight": (8, 8),
                       p + "mlp.gate_proj.weight": (16, 8), p + "mlp.up_proj.weight": (16, 8),
                       p + "mlp.down_proj.weight": (8, 16), p + "input_layernorm.weight": (8,),
                       p + "post_attention_layernorm.weight": (8,)})
    save_file({k: torch.zeros(s) for k, s in shapes.items()}, str(out / "model.safetensors"))
    return str(out)


def fake_overrides(model: str, *more: str) -> list[str]:
    """P = 6, T = 2 (S = 8); 2 prompts x 2 samples = 4 responses; mini-batch 1 prompt = 2 responses in
    micro-batches of 1 (two optimizer steps, so π_old is recomputed); no validation set."""
    return [f"actor_rollout_ref.model.path={model}", "data.max_prompt_length=6", "data.max_response_length=2",
            "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "data.val_files=[]",
            "actor_rollout_ref.rollout.max_num_seqs=3", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.use_kl_loss=true",
            "trainer.memory_per_worker_gb=1", *more]


def report_of(overrides: list[str]) -> MemoryReport:
    cfg = load_config(RLConfig, None, overrides)
    return check_memory(cfg, validate_rl_config(cfg))


def test_model_dims_from_config_and_safetensors(fake_model):
    d = read_model_dims(fake_model)
    assert (d.params, d.layer_params, d.root_params, d.head_params) == (1448, 592, 264, 0)
    assert (d.hidden, d.layers, d.heads, d.kv_heads, d.head_dim, d.intermediate, d.vocab) == (8, 2, 2, 1, 4, 16, 32)


def test_breakdown_by_hand(fake_model):
    # padded rows (no prompt sharing) keep the hand count short; test_memory_terms.py checks every layout
    (pool,) = report_of(fake_overrides(fake_model, "actor_rollout_ref.model.share_prompt_prefix=false")).pools
    phases = {ph.name: ph.parts for ph in pool.phases}
    # resident: the process itself; 1448 params x 4 bytes = 5792 for weights, gradients and the frozen reference;
    # AdamW 2 x 5792
    assert pool.resident == {"runtime (Python, torch, transformers)": RUNTIME_BYTES, "policy weights": 5792,
                             "policy gradients": 5792, "policy AdamW moments": 11584, "reference weights": 5792}
    # rollout: min(max_num_seqs 3, 2 prompts x 2 samples) = 3 rows, at most 3 distinct prompts of P = 6 tokens.
    #   prefill, per query of a layer: stream 4·8 = 32, plus the larger of attention (q, k, v 4·4 = 16; RoPE
    #   2·3·4 = 24; k, v repeated 2·2·4 = 16 per key; output 2·4 = 8; mask 1 per key -> 16 + 24 + 16·6/6... over
    #   6 queries and 6 keys: 96 + 144 + 96 + 48 + 36 = 420) and the MLP (3·16·6 = 288):
    #   (32·6 + 420) x 3 rows x 4 B = 7344; its KV cache 2 · 2 layers · 1 kv head · 4 dims = 16 values per token
    #   x 3 x 6 x 4 B = 1152 (no copy to other rows: every row has its own prompt here)
    #   decode: KV cache 16 x 3 x 8 x 4 = 1536, sampling 5 x 3 x 32 x 4 = 1920, and the decoder's weights packed
    #   (rollout.pack_weights): q, k, v, o (8·8 + 2·8·4 + 8·8 = 192) and gate, up, down (3·8·16 = 384) of 2 layers
    #   plus the tied head's own copy (32·8 = 256) = 1408 x 4 B = 5632: 9088 > 8496, so the decode is the peak
    assert phases["rollout"] == {"KV cache": 1536, "sampling logits": 1920, "decoder weights": 5632}
    #   unpacked, only the fused q|k|v (8·16) and gate|up (8·32) of 2 layers x 4 B = 3072 are new: 6528 < 8496
    (pool,) = report_of(fake_overrides(fake_model, "actor_rollout_ref.model.share_prompt_prefix=false",
                                       "actor_rollout_ref.rollout.pack_weights=false")).pools
    assert {ph.name: ph.parts for ph in pool.phases}["rollout"] == {"prefill layer transient": 7344,
                                                                     "prompt KV cache": 1152}
    # policy log-probs over micro-batches of min(3, 4 rows) = 3 padded rows of S = 8: a layer holds
    #   (stream 4·8·8 = 256 + attention 128 + 192 + 128 + 64 + 64 = 576 > MLP 384) x 3 x 4 B = 9984, more than the
    #   logits after it ([3, 8, 32] + 2 x [3, 2, 32] x 4 B = 4608)
    assert phases["policy log-probs"] == {"layer transient": 9984}
    # reference: micro-batches of min(8, 4 rows) = 4: 832 x 4 x 4 B = 13312 (logits 6144)
    assert phases["reference log-probs"] == {"layer transient": 13312}
    # update, 1 row of 8 tokens, per layer: norms (4·8 + 2)·8 = 272, projections' inputs 2·8·8 = 128,
    # q, k, v, output 2·2·4·(8 + 8) = 256, sdpa mask 8·8 = 64 and log-sum-exp 2·8 = 16, MLP 4·16·8 = 512:
    # 1248 x 4 B = 4992, x 2 layers = 9984; RoPE cos/sin 2·8·4 x 4 B = 256; head: final norm (2·8 + 1)·8,
    # its input at all 8 positions 8·8, log-probs and their exp 2·2·32 -> (136 + 64 + 128) x 4 B = 1312;
    # total 11552. Logits: all 8 positions [1, 8, 32] + 2 x [1, 2, 32], x 4 B = 1536
    assert phases["policy update"] == {"saved activations": 11552, "logits": 1536}
    assert phases["policy optimizer step"] == {}  # fused AdamW (plain fp32 tensors): no temporaries
    # peak: resident RUNTIME + 28960, + the reference pass's 13312
    assert (pool.peak_phase, pool.peak_bytes, pool.budget, pool.workers) == \
        ("reference log-probs", RUNTIME_BYTES + 28960 + 13312, GIB, 1)
    assert pool.breakdown == {**pool.resident, "layer transient": 13312}


def test_fsdp2_divides_resident_states_by_world(fake_model):
    # a mini-batch of 2 prompts x 2 = 4 responses, 2 per worker in micro-batches of 1
    base = fake_overrides(fake_model, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                          "actor_rollout_ref.actor.ppo_mini_batch_size=2")
    (ddp,) = report_of(base).pools
    (fsdp,) = report_of(base + ["actor_rollout_ref.actor.strategy=fsdp2"]).pools
    # 1448 / 2 = 724 params per rank: weights and gradients 2896 each, AdamW 5792; the reference stays whole
    assert fsdp.resident == {"runtime (Python, torch, transformers)": RUNTIME_BYTES, "policy weights": 2896,
                             "policy gradients": 2896, "policy AdamW moments": 5792, "reference weights": 5792}
    assert ddp.resident["policy weights"] == 5792
    fsdp_phases = {ph.name: ph.parts for ph in fsdp.phases}
    # generation runs on gathered weights: one full copy, 1448 x 4 B
    assert fsdp_phases["rollout"]["policy gathered weights"] == 5792
    # training gathers the root group (264 params) and one layer (592) at a time: 856 x 4 B
    assert fsdp_phases["policy update"]["gathered root group + one layer"] == 3424
    # with 2 micro-batches the gradients stay unsharded until the last one's reduce-scatter
    assert fsdp_phases["policy update"]["unsharded accumulated gradients"] == 5792
    ddp_update = {ph.name: ph.parts for ph in ddp.phases}["policy update"]
    # prompt sharing: beside the saved activations, the larger of the responses' KV cache (16 values per token
    # x 8 x 4 B = 512) and the logits' transients (3 x [1, 2, 32] x 4 B = 768)
    assert set(ddp_update) == {"saved activations", "logits"} and ddp_update["logits"] == 768
    # the sharded AdamW (DTensors) is torch's default one: on the CPU a per-tensor loop, the largest tensor's
    # temporaries (the 32 x 8 embedding over 2 ranks, 128 x 4 B); the plain fused one has none
    assert fsdp_phases["policy optimizer step"] == {"AdamW step temporaries": 512}
    assert {ph.name: ph.parts for ph in ddp.phases}["policy optimizer step"] == {}


def refusal(overrides: list[str]) -> MemoryBudgetError:
    with pytest.raises(MemoryBudgetError) as info:
        report_of(overrides)
    assert "trainer.memory_per_worker_gb" in str(info.value)
    return info.value


def gb(n_bytes: int) -> str:
    """A budget of the process (RUNTIME_BYTES) plus n_bytes."""
    return f"trainer.memory_per_worker_gb={(RUNTIME_BYTES + n_bytes) / GIB!r}"  # exact: a sum of powers of two


def phase_total(overrides: list[str], phase: str) -> int:
    cfg = load_config(RLConfig, None, overrides)
    (pool,) = estimate_memory(cfg, validate_rl_config(cfg)).pools
    return next(pool.total(ph) for ph in pool.phases if ph.name == phase)


def assert_round_trip(base: list[str], error: MemoryBudgetError) -> dict:
    """Every proposed fix passes check_memory when applied as key=value overrides."""
    assert error.fixes
    for fix in error.fixes:
        applied = [f"{k}={v}" for k, v in fix.items()]
        assert " ".join(applied) in str(error)
        report_of(base + applied)
    return error.fixes[0]


@pytest.mark.parametrize("knob, phase, start", [
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "policy update", 4),
    ("actor_rollout_ref.rollout.max_num_seqs", "rollout", 64),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "policy log-probs", 64),
])
def test_refusal_proposes_the_largest_value_that_fits(fake_model, knob, phase, start):
    # 16 prompts x 4 = 64 responses; mini-batch 4 prompts = 16 responses; everything else at 1
    sizes = ["data.train_batch_size=16", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
             "actor_rollout_ref.rollout.max_num_seqs=1", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
             "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"]
    base = fake_overrides(fake_model, *sizes, f"{knob}={start}")
    # a budget halfway between the phase at half its knob and at the knob: only that phase is over
    half = phase_total(fake_overrides(fake_model, *sizes, f"{knob}={start // 2}"), phase)
    budget = (half + phase_total(base, phase)) // 2
    base = base + [gb(budget - RUNTIME_BYTES)]
    error = refusal(base)
    assert re.search(rf"at its peak \({phase}\).*grows with {re.escape(knob)} \({start} in effect\)", str(error))
    assert_round_trip(base, error)
    # a memory lever may come first (packing, checkpointing); the knob alone is proposed too
    (value,) = next(f for f in error.fixes if list(f) == [knob]).values()
    assert start // 2 <= value < start
    bigger = value * 2 if knob.endswith("ppo_micro_batch_size_per_gpu") else value + 1  # next divisor of 16 / next
    assert phase_total(base + [f"{knob}={bigger}"], phase) > budget


def test_resident_states_that_do_not_fit_propose_fsdp2_and_workers(fake_model):
    base = fake_overrides(fake_model, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                          "actor_rollout_ref.actor.use_kl_loss=false", gb(20_000))
    error = refusal(base)  # resident 23168 bytes (16 per parameter) > 20000
    assert "resident states alone (runtime (Python, torch, transformers), policy weights, policy gradients, " \
           "policy AdamW moments) take" in str(error)
    fix = assert_round_trip(base, error)
    # ddp never fits, whatever the workers. FSDP2 over w workers (w divides the 16-response mini-batch): the update
    # adds activations 11936 + logits 1536 + the gathered root group and a layer 3424 = 16896, plus, while a worker
    # has several micro-batches (w <= 8), 5792 of unsharded gradients: over 20000 with any resident states. At
    # w = 16 one response each: 16896 + 16 B x ceil(1448 / 16) = 91 params = 1456 resident -> 18352 fits
    assert fix == {"trainer.backend": "ray", "trainer.n_gpus_per_node": 16, "actor_rollout_ref.actor.strategy": "fsdp2"}


def test_nothing_fits_says_so(fake_model):
    error = refusal(fake_overrides(fake_model, gb(4_000)))  # the reference alone, never sharded, is 5792
    assert error.fixes == []
    assert "no memory lever (activation checkpointing, packing, bf16, token budgets), micro-batch size or worker " \
           "count fits" in str(error)


def test_default_config_fits_on_this_machine():
    cfg = RLConfig()
    report = check_memory(cfg, validate_rl_config(cfg))
    (pool,) = report.pools
    # its validation set is not there to count (data/arithmetic/val.parquet, relative), so a full validation call
    # of 256 prompts of 64 tokens is counted, whose prefill is the peak
    assert pool.name == "actor" and pool.peak_phase == "validation" and pool.peak_bytes < pool.budget
    assert report.describe().startswith("memory per worker")
    # no memory_per_worker_gb: this machine's RAM, for its one process
    assert pool.budget == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_cpu_budget_is_ram_over_the_processes_of_a_node(fake_model):
    overrides = fake_overrides(fake_model, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                               "algorithm.adv_estimator=gae", "critic.n_workers=2", "trainer.memory_per_worker_gb=null")
    report = report_of(overrides)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # 2 policy workers + a critic pool of 2, all on the one node
    assert [(p.name, p.workers, p.budget) for p in report.pools] == [("actor", 2, ram // 4), ("critic", 2, ram // 4)]
    assert not any(k.startswith("critic") for k in report.pools[0].resident)


def test_a_per_node_critic_pool_counts_its_workers_per_node(fake_model):
    """critic.enable_resource_pool: 2 x 2 critic workers over 2 nodes = 2 per node beside the node's 1 policy worker
    (critic.n_workers=4 on 2 nodes would count the same, rounded up: 4 / 2)."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for critic in (["critic.enable_resource_pool=true", "critic.n_gpus_per_node=2", "critic.nnodes=2"],
                   ["critic.n_workers=4"]):
        report = report_of(fake_overrides(fake_model, "trainer.backend=ray", "trainer.nnodes=2",
                                          "algorithm.adv_estimator=gae", *critic, "trainer.memory_per_worker_gb=null",
                                          "data.train_batch_size=2", "critic.ppo_mini_batch_size=2"))
        assert [(p.name, p.workers, p.budget) for p in report.pools] == [("actor", 2, ram // 3), ("critic", 4, ram // 3)]


def test_the_async_rollout_pool_is_counted_with_its_own_weights_and_shares_the_node(fake_model):
    overrides = fake_overrides(fake_model, "trainer.backend=ray", "rollout.n_gpus_per_node=1", "rollout.nnodes=1",
                               "trainer.memory_per_worker_gb=null")
    report = report_of(overrides)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # 1 trainer worker + 1 rollout worker on the one node: each gets half the RAM
    assert [(p.name, p.workers, p.budget) for p in report.pools] == [("actor", 1, ram // 2), ("rollout", 1, ram // 2)]
    rollout = report.pools[1]
    # its own fp32 copy of the 1448 parameters, and a pushed copy beside it while a push loads
    assert rollout.resident["rollout weights (own copy)"] == 1448 * 4
    assert [ph.name for ph in rollout.phases] == ["rollout", "weight push"]
    assert rollout.phases[1].parts == {"pushed weights": 1448 * 4}
    # it never validates and holds no training state
    assert not any(k.startswith("policy") for k in rollout.resident)


@pytest.mark.skipif(torch.cuda.is_available(), reason="reads the GPU's memory when there is one")
def test_cuda_without_a_gpu_needs_memory_per_worker_gb(fake_model):
    cfg = load_config(RLConfig, None, fake_overrides(fake_model, "trainer.memory_per_worker_gb=null"))
    plan = validate_rl_config(cfg)
    cfg.trainer.device = "cuda"
    with pytest.raises(ConfigError, match=r"trainer\.device=cuda.*set trainer\.memory_per_worker_gb"):
        check_memory(cfg, plan)


def saved_bytes(attn_implementation: str, batch: int, prompt: int, response: int) -> int:
    """Bytes of the distinct non-parameter float storages autograd saves in one policy-loss forward of
    tiny-arith (log-probs and entropy, as workers/policy.py computes them), backward run after."""
    from hybridrl.batch import Sequences
    from hybridrl.models.forward import response_log_probs
    from hybridrl.models.loading import load_causal_lm

    model = load_causal_lm("tiny-arith").train()
    model.config._attn_implementation = attn_implementation
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt + response), generator=g)
    attention = torch.ones_like(ids)
    attention[0, :5] = 0  # one left-padded prompt
    with SavedActivations(model) as saved:
        log_probs, entropy = response_log_probs(model, Sequences(ids, attention, torch.ones(batch, response, dtype=torch.long)),
                                                with_entropy=True)
    (log_probs.sum() + entropy.sum()).backward()
    return saved.bytes


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_activation_estimate_matches_what_autograd_saves(attn):
    from hybridrl.plan.memory_terms import head_positions, padded_segments, saved_activation_bytes

    # the default run's shapes on padded rows: P = 64, T = 8, a micro-batch of 4 (test_memory_terms.py checks
    # every layout on a model with grouped K/V heads)
    segments = padded_segments(4, 4, 64, 8, share=False)
    estimate = saved_activation_bytes(read_model_dims(resolve_model_path("tiny-arith")), segments, 4, 8, attn,
                                      head_at=head_positions(segments, "padded", 4, 4, 8))
    # the estimate counts what each layer saves exactly; a 2 % band leaves room for small tensors
    assert estimate == pytest.approx(saved_bytes(attn, 4, 64, 8), rel=0.02)


@pytest.mark.parametrize("placement, pools", [
    ([], [("actor", 1)]),  # backend=local: one process holds every role
    (["trainer.backend=ray"], [("actor", 1), ("driver (reward model)", 1)]),
    (["trainer.backend=ray", "reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=2",
      "reward_model.nnodes=1"], [("actor", 1), ("reward_model", 2)]),
])
def test_reward_model_is_counted_where_it_runs(random_model_dir, reward_model_dir, placement, pools):
    report = report_of([f"actor_rollout_ref.model.path={random_model_dir}", "reward_model.enable=true",
                        f"reward_model.model.path={reward_model_dir}", "reward_model.rule_weight=1.0",
                        "trainer.memory_per_worker_gb=1", *placement])
    assert [(p.name, p.workers) for p in report.pools] == pools
    holder = report.pools[-1]
    # hidden 32, 2 layers, vocab 320: embeddings 10240 + 2 x 10400 per layer (q, k, v with biases 3 x 1056, o 1024,
    # MLP 3 x 2048, norms 64) + final norm 32 + score head 32 = 31104 params x 4 B
    assert holder.resident["reward model weights"] == 124416
    assert "reward scoring" in [ph.name for ph in holder.phases]


def test_lora_counts_adapter_states_and_no_reference_copy(fake_model):
    pytest.importorskip("peft")
    (pool,) = report_of(fake_overrides(fake_model, "actor_rollout_ref.model.lora_rank=2")).pools
    # adapters, r·(in + out) per linear, r = 2: q 2·(8+8) = 32, k 2·(8+4) = 24, v 24, o 32, gate 2·(8+16) = 48,
    # up 48, down 48 -> 256 per layer, 512 for 2 layers. Weights (1448 + 512) x 4 B = 7840; gradients
    # 512 x 4 = 2048 and AdamW 2 x 2048 for the adapters only; the reference is the policy, adapter off
    assert pool.resident == {"runtime (Python, torch, transformers)": RUNTIME_BYTES, "policy weights": 7840,
                             "policy gradients": 2048, "policy AdamW moments": 4096}
    phases = {ph.name: ph.parts for ph in pool.phases}
    assert phases["policy optimizer step"] == {}  # fused AdamW over the adapters: no temporaries
    (only_q,) = report_of(fake_overrides(fake_model, "actor_rollout_ref.model.lora_rank=2",
                                         "actor_rollout_ref.model.target_modules=[q_proj,down_proj]",
                                         "actor_rollout_ref.model.exclude_modules=[down_proj]")).pools
    assert only_q.resident["policy gradients"] == 2 * 32 * 4  # q_proj of 2 layers


@pytest.mark.parametrize("targets, exclude", [("all-linear", None), (["q_proj", "v_proj", "down_proj"], None),
                                              ("all-linear", ["o_proj", "up_proj"])])
def test_lora_param_count_equals_what_peft_trains(targets, exclude):
    pytest.importorskip("peft")
    from hybridrl.plan.memory import lora_params
    from hybridrl.models.loading import load_causal_lm
    from hybridrl.models.lora import LoraSettings, apply_lora

    model = apply_lora(load_causal_lm("tiny-arith"), LoraSettings(8, 16.0, targets, exclude))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    as_list = ["all-linear"] if targets == "all-linear" else targets
    assert lora_params(read_model_dims(resolve_model_path("tiny-arith")), 8, as_list, exclude or []) == trained


def test_a_critic_pool_of_its_own_is_shown_apart_with_the_critics_states(fake_model):
    """`hybridrl plan ... critic.n_workers=1`: the critic pool's line and breakdown, and none of it in the actor's."""
    report = report_of(fake_overrides(fake_model, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                      "algorithm.adv_estimator=gae", "critic.n_workers=1"))
    actor, critic = report.pools
    # the critic is the causal LM with its tied head replaced by a value head Linear(8, 1) with a bias:
    # 1448 + 9 = 1457 parameters, fp32 weights and gradients (4 bytes each) and two AdamW moments (8), whole on
    # its one ddp worker
    assert (critic.name, critic.workers) == ("critic", 1)
    assert {k: v for k, v in critic.resident.items() if k.startswith("critic")} == {
        "critic weights": 1457 * 4, "critic gradients": 1457 * 4, "critic AdamW moments": 1457 * 8}
    assert not any(k.startswith("critic") for k in actor.breakdown) and actor.workers == 2
    lines = report.describe().splitlines()
    # the peak phase (values or update) depends on the precision `auto` picks on this machine
    start = lines.index(f"  critic pool, 1 worker(s): peak {fmt_bytes(critic.peak_bytes)} in {critic.peak_phase}, "
                        "budget 1.00 GiB (trainer.memory_per_worker_gb=1.0)")
    # 5828 B = 5.7 KiB, 11656 B = 11.4 KiB (the policy's 1448 * 8 = 11584 B shows as 11.3 KiB)
    assert lines[start + 1:start + 5] == ["    runtime (Python, torch, transformers): 500.0 MiB",
                                          "    critic weights: 5.7 KiB", "    critic gradients: 5.7 KiB",
                                          "    critic AdamW moments: 11.4 KiB"]
    assert lines[-1].startswith("    other phases: critic ") and "policy" not in "".join(lines[start:])
