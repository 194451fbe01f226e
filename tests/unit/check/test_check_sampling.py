"""The `sampling` check passes on a correct setup (a sharpened twin of tiny-arith, hf engine, temperature 0.7 and
top-p 0.9) and reports ✗ with the measured gap when our engine's log-probs come from another distribution than
it documents, seeded by patching hybridrl's own token chooser: the temperature ignored, or the top-p filtered
distribution (what vLLM reports) where hf documents the unfiltered one. The verdict's rules for the vLLM case
(filtered log-probs: rollout_is must correct them) and for a bf16 gap are tested on measured values made up here."""

from __future__ import annotations

import pytest
import torch

import hybridrl.rollout.hf as hf
from hybridrl.check.context import CheckContext
from hybridrl.check.registry import CHECKS
from hybridrl.check.result import FAIL, PASS
from hybridrl.check.runner import _run_one
from hybridrl.check.sampling import SAMPLED, TEMPERED, Measured, nucleus, verdict

SAMPLING = ["actor_rollout_ref.rollout.temperature=0.7", "actor_rollout_ref.rollout.top_p=0.9"]


def context(tmp_path, arith_data, *overrides: str) -> CheckContext:
    return CheckContext(None, ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
                               f"data.val_files=[{arith_data['val']}]", *SAMPLING, *overrides], str(tmp_path / "work"))


def run_check(ctx: CheckContext):
    import hybridrl.check.sampling  # noqa: F401  (registers the check)

    return _run_one(CHECKS.entry("sampling"), ctx)


def text(r) -> str:
    return "\n".join([r.summary, *r.details, r.fix or ""])


def test_nucleus_keeps_the_smallest_set_reaching_p():
    # probs 0.5, 0.3, 0.15, 0.05: the mass before each is 0, .5, .8, .95, so p=0.7 keeps the first two
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    assert torch.isfinite(nucleus(logits, 0.7)).tolist() == [[False, True, False, True]]
    assert torch.equal(nucleus(logits, 1.0), logits)


@pytest.mark.slow
def test_hf_engine_agrees_with_the_trainer_under_temperature_and_top_p(tmp_path, arith_data):
    r = run_check(context(tmp_path, arith_data))
    assert r.status == PASS, text(r)
    assert "the engine's log-probs are of π at the run's temperature, before top-k/top-p" in text(r)
    assert "twin sharpened" in text(r)


def _untempered(logits, sampling, u):
    tokens, _ = _real_choose(logits, sampling, u)
    return tokens, torch.log_softmax(logits.float(), -1).gather(-1, tokens[:, None])[:, 0]


def _filtered(logits, sampling, u):
    tokens, _ = _real_choose(logits, sampling, u)
    scaled = hf.filter_logits(logits.float() / sampling.temperature, sampling.top_k, sampling.top_p)
    return tokens, torch.log_softmax(scaled, -1).gather(-1, tokens[:, None])[:, 0]


_real_choose = hf.choose_tokens


@pytest.mark.slow
@pytest.mark.parametrize("seeded, name", [(_untempered, "untempered"), (_filtered, SAMPLED)])
def test_engine_log_probs_of_another_distribution_fail(tmp_path, arith_data, monkeypatch, seeded, name):
    monkeypatch.setattr(hf, "choose_tokens", seeded)
    r = run_check(context(tmp_path, arith_data))
    assert r.status == FAIL, text(r)
    assert r.summary.startswith(f"engine log-probs are of a different distribution: {name}, not {TEMPERED}"), r.summary
    assert "mean gap" in r.summary and "report it" in r.fix


# ---- the verdict on made-up measurements ------------------------------------------------------------------------
def measured(engine_shift: float, filtered_shift: float = 0.1) -> Measured:
    """Trainer log-probs t; the filtered distribution's are t + filtered_shift (it renormalises over fewer tokens);
    the engine's are t + engine_shift."""
    t = torch.full((4, 6), -2.0)
    return Measured(t + engine_shift, t.clone(), {TEMPERED: t.clone(), SAMPLED: t + filtered_shift},
                    torch.ones(4, 6, dtype=torch.bool))


def config(tmp_path, *overrides: str):
    return CheckContext(None, [*SAMPLING, *overrides], str(tmp_path)).cfg


def test_vllm_filtered_log_probs_without_a_correction_fail(tmp_path):
    cfg = config(tmp_path, "actor_rollout_ref.rollout.name=vllm", "algorithm.rollout_correction.rollout_is=null")
    r = verdict(measured(0.1), cfg, [])
    assert r.status == FAIL, text(r)
    assert "no rollout correction is configured: the engine's log-probs are of the top-k/top-p filtered" in r.summary
    assert r.fix.startswith("set algorithm.rollout_correction.rollout_is=token")


def test_vllm_filtered_log_probs_with_rollout_is_pass(tmp_path):
    cfg = config(tmp_path, "actor_rollout_ref.rollout.name=vllm", "algorithm.rollout_correction.rollout_is=token")
    r = verdict(measured(0.1), cfg, [])
    assert r.status == PASS, text(r)
    assert "rollout_is=token corrects it" in r.summary


def test_a_rejection_band_that_rejects_the_filtered_log_probs_fails(tmp_path):
    cfg = config(tmp_path, "actor_rollout_ref.rollout.name=vllm", "algorithm.rollout_correction.rollout_is=token",
                 "algorithm.rollout_correction.rollout_rs=geometric",
                 "algorithm.rollout_correction.rollout_rs_threshold=1.001")
    r = verdict(measured(0.1), cfg, [])
    assert r.status == FAIL and "rejects 100% of the response tokens" in r.summary, text(r)


def test_a_precision_gap_beyond_tolerance_needs_rollout_is(tmp_path):
    bf16 = ["actor_rollout_ref.rollout.dtype=bfloat16"]
    r = verdict(measured(0.05), config(tmp_path, *bf16, "algorithm.rollout_correction.rollout_is=null"), [])
    assert r.status == FAIL and "compute π at different precision" in r.summary, text(r)
    assert "rollout_is=token" in r.fix
    ok = verdict(measured(0.05), config(tmp_path, *bf16, "algorithm.rollout_correction.rollout_is=token"), [])
    assert ok.status == PASS, text(ok)
