"""On-policy distillation end to end on tiny models: a real run trains every weight with finite distill/*
metrics, a teacher equal to the student sees KL 0 at the first step, a teacher with another tokenizer stops
the start naming both folders, and a resumed distillation run equals the uninterrupted one."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch

from hybridrl.errors import ConfigError
from hybridrl.models.loading import load_tokenizer

from run_helpers import metrics, overrides, resume_equals_uninterrupted, train  # tests/integration/run_helpers.py

pytestmark = pytest.mark.slow

DISTILL = ("distillation.enabled=true", "trainer.val_before_train=false", "trainer.test_freq=-1")


@pytest.fixture(scope="module")
def teacher_dir(perturbed_tiny_arith) -> str:
    """tiny-arith with noise on its weights: the student (tiny-arith) has somewhere to go."""
    return perturbed_tiny_arith(7)


@pytest.mark.parametrize("mode", [[], ["distillation.distillation_loss.use_policy_gradient=true",
                                         "distillation.distillation_loss.loss_mode=k1"]], ids=["loss", "policy_gradient"])
def test_a_distillation_run_trains_every_weight_with_finite_metrics(arith_data, tmp_path, teacher_dir, mode):
    before = {}
    run, summary = train(overrides(arith_data, tmp_path, 2, *DISTILL, f"distillation.teacher_model.model_path={teacher_dir}",
                                   *mode),
                         before_fit=lambda r: before.update({n: p.detach().clone()
                                                             for n, p in r.policy.module.named_parameters()}))
    assert summary.steps == 2
    rows = metrics(tmp_path)
    for row in rows:
        for key in ("distill/teacher_kl_mean", "distill/teacher_kl_max", "distill/teacher_logprob_mean",
                    "actor/distill_loss", "actor/pg_loss"):
            assert math.isfinite(row[key]), (key, row)
        assert row["distill/teacher_kl_mean"] > 0 and row["distill/teacher_logprob_mean"] < 0
        assert row["distill/teacher_kl_max"] >= row["distill/teacher_kl_mean"]
    assert "timing_s/teacher" in _logged_keys(tmp_path)
    unchanged = [n for n, p in run.policy.module.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def _logged_keys(run_dir) -> set[str]:
    """Every key of metrics.jsonl (run_helpers.metrics drops the timings)."""
    return {k for line in open(os.path.join(run_dir, "metrics.jsonl")) for k in json.loads(line)}


def test_a_teacher_equal_to_the_student_sees_kl_zero_at_the_first_step(arith_data, tmp_path):
    # one optimizer step per step (a mini-batch of all 8 prompts) and no task reward: the first update's forward is
    # the student's initial weights, which are the teacher's
    train(overrides(arith_data, tmp_path, 1, *DISTILL, "distillation.teacher_model.model_path=tiny-arith",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=8", "distillation.distillation_loss.use_task_rewards=false"))
    (row,) = metrics(tmp_path)
    assert abs(row["distill/teacher_kl_mean"]) < 1e-5  # the engine's log-probs against the teacher's forward
    assert abs(row["actor/distill_loss"]) < 1e-6 and row["actor/pg_loss"] == 0.0
    assert row["actor/grad_norm"] < 1e-4


def test_a_teacher_with_another_tokenizer_stops_the_start_naming_both_folders(arith_data, tmp_path, teacher_dir):
    other = tmp_path / "other-teacher"
    shutil.copytree(teacher_dir, other)
    tok = load_tokenizer(teacher_dir)
    tok.add_tokens(["<extra>"])
    tok.save_pretrained(other)
    with pytest.raises(ConfigError) as e:
        train(overrides(arith_data, tmp_path / "run", 1, *DISTILL, f"distillation.teacher_model.model_path={other}"))
    msg = str(e.value)
    assert "\n" not in msg and str(other) in msg and "actor_rollout_ref.model.path=tiny-arith" in msg
    assert "has another tokenizer" in msg


def test_resume_of_a_distillation_run_equals_the_uninterrupted_run(arith_data, tmp_path, teacher_dir):
    args = lambda d: overrides(arith_data, d, 4, *DISTILL, f"distillation.teacher_model.model_path={teacher_dir}",  # noqa: E731
                               "trainer.save_freq=2", "distillation.distillation_loss.distillation_loss_coef=0.5")
    resume_equals_uninterrupted(args, tmp_path)
