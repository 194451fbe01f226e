"""The memory estimate with the scale levers, and refusals that name them: activation checkpointing, packing,
bf16 and token budgets lower the phases they act on; the validation call is sized by the validation set; a
model folder without weights is sized from its config.json; verl's run_qwen2-7b.sh is refused naming
checkpointing, and without checkpointing the refusal proposes it."""

from __future__ import annotations

import json
import shutil

import pytest
import pyarrow as pa
import pyarrow.parquet as pq

from hybridrl.config.loader import load_config
from hybridrl.plan.memory import GIB, MemoryBudgetError, estimate_memory, read_model_dims
from hybridrl.plan.memory_fixes import check_memory
from hybridrl.plan.memory_phases import validation_prompts
from hybridrl.plan.memory_terms import kv_cache_bytes
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.models.loading import resolve_model_path

QWEN2_7B_CONFIG = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=3584, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                       tie_word_embeddings=False, max_position_embeddings=32768, rms_norm_eps=1e-6)
# verl's examples/grpo_trainer/run_qwen2-7b.sh (verl commit b178a3c), model and data paths made local, with the
# hf rollout and no rollout TP (the figures below are the hf engine's: vLLM's own weights and KV cache come on top)
QWEN2_7B = [
    "data.train_files=/data/gsm8k/train.parquet", "data.val_files=/data/gsm8k/test.parquet",
    "algorithm.adv_estimator=grpo", "data.train_batch_size=1024", "data.max_prompt_length=512",
    "data.max_response_length=1024", "data.filter_overlong_prompts=True", "data.truncation=error",
    "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True", "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40", "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.use_kl_in_reward=False", "trainer.critic_warmup=0", "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
    "trainer.save_freq=20", "trainer.test_freq=5", "trainer.total_epochs=15"]


@pytest.fixture(scope="module")
def qwen2_7b(tmp_path_factory) -> str:
    """Qwen2-7B-Instruct's config.json alone: the weights are not needed to plan."""
    out = tmp_path_factory.mktemp("qwen2-7b")
    (out / "config.json").write_text(json.dumps(QWEN2_7B_CONFIG))
    return str(out)


def report(overrides: list[str]):
    cfg = load_config(RLConfig, None, overrides)
    return check_memory(cfg, validate_rl_config(cfg))


def pool_of(overrides: list[str]):
    cfg = load_config(RLConfig, None, overrides)
    (pool, *_) = estimate_memory(cfg, validate_rl_config(cfg)).pools
    return pool


def test_dims_from_config_alone_equal_the_ones_from_the_weights(tmp_path):
    tiny = resolve_model_path("tiny-arith")
    shutil.copy(f"{tiny}/config.json", tmp_path / "config.json")
    assert read_model_dims(str(tmp_path)) == read_model_dims(tiny)


def test_qwen2_7b_from_its_config_has_its_parameter_count(qwen2_7b):
    d = read_model_dims(qwen2_7b)
    # Qwen2-7B: 7.62B parameters (embedding and untied head 2 x 152064 x 3584 = 1.09B; 28 layers of 233.5M)
    assert 7.60e9 < d.params < 7.63e9 and d.head_params == 152064 * 3584


def test_verl_qwen2_7b_refusal_on_this_machine_names_checkpointing(qwen2_7b):
    with pytest.raises(MemoryBudgetError) as e:
        report([*QWEN2_7B, f"actor_rollout_ref.model.path={qwen2_7b}"])
    # 8 workers on this machine's RAM: the fp32 weights, gradients and AdamW state of 7.6B parameters alone
    # exceed a worker's share; checkpointing is on and counted, and the refusal says so
    message = str(e.value)
    assert "activation checkpointing (actor_rollout_ref.model.enable_gradient_checkpointing=true)" in message
    assert "resident states alone" in message


def test_verl_qwen2_7b_without_checkpointing_is_told_to_checkpoint(qwen2_7b):
    # on eight 80 GiB GPUs, sharded, with the reference in bf16, but checkpointing turned off: the update's
    # saved activations are what does not fit, and checkpointing is the first thing proposed
    command = [*QWEN2_7B, f"actor_rollout_ref.model.path={qwen2_7b}", "trainer.device=cuda",
               "trainer.memory_per_worker_gb=80", "actor_rollout_ref.actor.strategy=fsdp2",
               "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
               "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
               "actor_rollout_ref.model.enable_gradient_checkpointing=False"]
    with pytest.raises(MemoryBudgetError) as e:
        report(command)
    assert "policy update" in str(e.value) and "saved activations" in str(e.value)
    first = e.value.fixes[0]
    assert first["actor_rollout_ref.model.enable_gradient_checkpointing"] is True
    assert "it fits with activation checkpointing" in str(e.value)
    report([*command, *[f"{k}={v}" for k, v in first.items()]])  # the proposal fits


def tiny(*more: str) -> list[str]:
    return ["data.val_files=[]", "trainer.memory_per_worker_gb=4", "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=8", "data.max_prompt_length=64", "data.max_response_length=64",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", *more]


def update_parts(*more: str) -> dict[str, int]:
    return next(ph.parts for ph in pool_of(tiny(*more)).phases if ph.name == "policy update")


def test_levers_lower_the_update():
    plain = update_parts("actor_rollout_ref.model.share_prompt_prefix=false")
    shared = update_parts()
    packed = update_parts("actor_rollout_ref.model.use_remove_padding=true")
    ckpt = update_parts("actor_rollout_ref.model.use_remove_padding=true",
                        "actor_rollout_ref.model.enable_gradient_checkpointing=true")
    bf16 = update_parts("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")
    budget = update_parts("actor_rollout_ref.actor.use_dynamic_bsz=true",
                          "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024")
    saved = {name: parts["saved activations"] for name, parts in
             [("plain", plain), ("shared", shared), ("packed", packed), ("ckpt", ckpt), ("bf16", bf16),
              ("budget", budget)]}
    # sharing computes 8 prompts once instead of 64 times; checkpointing keeps only layer inputs; bf16 halves the
    # matmul outputs; a budget of 1024 tokens holds 8 sequences of 128 where the fixed micro-batch holds 64
    assert saved["plain"] > saved["shared"] > saved["ckpt"]
    assert saved["bf16"] < saved["shared"] and "bf16 weight copies (autocast)" in bf16
    assert saved["budget"] * 4 < saved["shared"]
    # packing saves the padding, which sequences at full length (the estimate's bound) do not have; in rows of
    # the model's width (256) a group of 8 responses of 64 tokens spans 3 rows, each with its own prompt copy
    assert saved["shared"] < saved["packed"] < saved["plain"]


def test_token_budget_is_the_update_knob():
    pool = pool_of(tiny("actor_rollout_ref.actor.use_dynamic_bsz=true",
                        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024"))
    update = next(ph for ph in pool.phases if ph.name == "policy update")
    assert (update.knob, update.knob_value, update.knob_min) == \
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", 1024, 128)


def test_validation_is_sized_by_the_validation_set(tmp_path):
    path = str(tmp_path / "val.parquet")
    pq.write_table(pa.Table.from_pylist([{"x": i} for i in range(12)]), path)
    base = tiny(f"data.val_files=[{path}]", "actor_rollout_ref.rollout.val_kwargs.n=2")
    cfg = load_config(RLConfig, None, base)
    assert validation_prompts(cfg) == 12
    assert validation_prompts(load_config(RLConfig, None, [*base, "data.val_max_samples=5"])) == 5
    assert validation_prompts(load_config(RLConfig, None, tiny("data.val_files=[/nowhere.parquet]"))) == 256
    validation = next(ph for ph in pool_of(base).phases if ph.name == "validation")
    # 12 prompts x 2 samples = 24 rows (not 256), one generate call; tiny-arith's KV cache for 24 rows of 128
    d = read_model_dims(resolve_model_path("tiny-arith"))
    assert validation.knob_value == 24
    assert validation.parts.get("KV cache", kv_cache_bytes(d, 24, 128)) == kv_cache_bytes(d, 24, 128)


def test_refusal_proposes_a_lever_before_smaller_micro_batches():
    over = tiny("trainer.memory_per_worker_gb=0.75", "actor_rollout_ref.model.share_prompt_prefix=false")
    with pytest.raises(MemoryBudgetError) as e:
        report(over)
    keys = [list(f) for f in e.value.fixes]
    assert keys[0][0] in ("actor_rollout_ref.model.enable_gradient_checkpointing",
                          "actor_rollout_ref.model.use_remove_padding")
    assert any(k == ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] or
               k[-1] == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" and "model" not in k[0] for k in keys)
    for fix in e.value.fixes:
        report([*over, *[f"{k}={v}" for k, v in fix.items()]])
    assert GIB  # budgets are in GiB (trainer.memory_per_worker_gb)
