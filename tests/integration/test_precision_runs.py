"""Real runs on the bundled tiny model with the precision and memory levers on: bf16 compute over fp32
masters for every role, a bf16 reference, bf16 generation, activation checkpointing, and the offload keys
(no effect on a CPU). Every trained parameter moves and stays fp32; the bf16 engine's gap to the trainer
shows in the mismatch metric."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.models.memory import is_checkpointing
from test_train import base_overrides, run_training

pytestmark = pytest.mark.slow

BF16_EVERYWHERE = [
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
    "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", "actor_rollout_ref.rollout.dtype=bfloat16",
    "critic.model.fsdp_config.mixed_precision.param_dtype=bf16",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true", "actor_rollout_ref.model.share_prompt_prefix=false",
    "critic.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true", "actor_rollout_ref.ref.fsdp_config.param_offload=true",
]


def test_ppo_with_kl_in_bf16_with_checkpointing_trains_every_parameter_in_fp32(arith_data, tmp_path):
    run, before, _, records = run_training(base_overrides(arith_data, tmp_path) + BF16_EVERYWHERE + [
        "algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.weight_decay=0", "actor_rollout_ref.actor.optim.lr=1e-3"])
    policy = run.policy.module
    assert [n for n, p in policy.named_parameters() if torch.equal(p, before[n])] == []
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert {v.dtype for s in run.policy.optimizer.state.values() for k, v in s.items() if k != "step"} == {torch.float32}
    assert {p.dtype for p in run.reference.module.parameters()} == {torch.bfloat16}  # half the reference's memory
    assert is_checkpointing(policy) and is_checkpointing(run.critic.module)
    for record in records[1:]:
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in record.values())
        assert "critic/vf_loss" in record and "actor/kl_loss" in record
        # bf16 samples, bf16 trainer log-probs: close, not equal (fp32 runs agree within 1e-4)
        assert 1e-4 < record["training/rollout_probs_diff_max"] < 0.5


def test_auto_precision_on_a_fast_bf16_machine_trains_in_bf16_with_token_tis(arith_data, tmp_path, monkeypatch):
    """The default keys alone, with `auto` resolving as on a CPU with AVX512-BF16: the run computes in bf16 over
    fp32 masters, generates in bf16 and corrects the gap with token TIS (its metrics appear)."""
    monkeypatch.setenv("HYBRIDRL_AUTO_DTYPE", "bf16")
    run, before, _, records = run_training(base_overrides(arith_data, tmp_path) + [
        "actor_rollout_ref.actor.optim.lr=1e-3"])
    assert run.policy.settings.rollout_is == "token"
    assert {p.dtype for p in run.policy.module.parameters()} == {torch.float32}
    assert any(not torch.equal(p, before[n]) for n, p in run.policy.module.named_parameters())
    for record in records[1:]:
        assert 1e-4 < record["training/rollout_probs_diff_max"] < 0.5  # a bf16 engine: close, not equal
        assert "rollout_corr/is_weight_mean" in record and math.isfinite(record["rollout_corr/is_weight_mean"])


RS = "algorithm.rollout_correction.rollout_rs"


def test_rollout_rejection_masks_what_a_bf16_engine_puts_outside_the_band(arith_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRIDRL_AUTO_DTYPE", "bf16")  # a bf16 engine: ratios pi_old / pi_rollout spread around 1
    base = base_overrides(arith_data, tmp_path) + ["actor_rollout_ref.actor.optim.lr=1e-3"]
    _, _, _, loose = run_training(base + [f"{RS}=token", "algorithm.rollout_correction.rollout_rs_threshold=1.01"])
    for record in loose[1:]:
        assert 0 < record["rollout_corr/rs_rejected_token_frac"] < 1
        assert math.isfinite(record["actor/pg_loss"])
    # a band 1e-6 wide around 1 on the whole response's ratio: responses go whole, and only ratios of exactly 1
    # (every token's probability equal in both, e.g. near-certain tokens) pass
    _, _, _, tight = run_training(base + [f"{RS}=sequence", "algorithm.rollout_correction.rollout_rs_threshold=1.000001",
                                          f"trainer.default_local_dir={tmp_path / 'tight'}"])
    for a, b in zip(loose[1:], tight[1:]):
        assert b["rollout_corr/rs_rejected_seq_frac"] > 0.5
        assert b["rollout_corr/rs_rejected_token_frac"] > a["rollout_corr/rs_rejected_token_frac"]


def test_rollout_rejection_that_rejects_nothing_trains_like_the_run_without_it(arith_data, tmp_path):
    """fp32 engine: ratios within 1e-5 of 1, so a band of [0.5, 2] keeps every token; the run then differs from the
    one without rejection only in pi_old, recomputed instead of taken from the update's first forward."""
    base = base_overrides(arith_data, tmp_path) + ["actor_rollout_ref.actor.optim.lr=1e-3"]
    _, _, _, plain = run_training(base)
    _, _, _, rs = run_training(base + [f"{RS}=token", f"trainer.default_local_dir={tmp_path / 'rs'}"])
    for a, b in zip(plain[1:], rs[1:]):
        assert b["rollout_corr/rs_rejected_token_frac"] == 0.0
        for key in ("actor/pg_loss", "actor/entropy", "critic/score/mean", "response_length/mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
