"""The `update` check passes on a correct setup (a twin of tiny-arith: 8 responses in 2 micro-batches, 3 of them with
advantage 0 left out; and the same over 2 gloo ranks) and reports ✗ naming the split and the ratio of gradients
for the accumulation bug it exists for, seeded by patching our own update: each micro-batch's loss normalised by
its own token count instead of the mini-batch's (TRL PR#6024's mis-scaled loss). Also seeded: a token-mean
normaliser that divides by the responses, not the tokens; and an optimiser step against the gradient."""

from __future__ import annotations

import pytest
import torch

import hybridrl.workers.policy as policy_module
from hybridrl.algos.reduce import LossScale, reduce_loss
from hybridrl.check.context import CheckContext
from hybridrl.check.registry import CHECKS
from hybridrl.check.result import FAIL, NA, PASS
from hybridrl.check.runner import _run_one
from hybridrl.check.update import DEFINITIONS, step_lowers_loss, twin_batch
from hybridrl.workers.policy import Policy


def context(tmp_path, arith_data, *overrides: str) -> CheckContext:
    return CheckContext(None, ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
                               f"data.val_files=[{arith_data['val']}]", *overrides], str(tmp_path / "work"))


def run_check(ctx: CheckContext):
    import hybridrl.check.update  # noqa: F401  (registers the check)

    return _run_one(CHECKS.entry("update"), ctx)


def text(r) -> str:
    return "\n".join([r.summary, *r.details, r.fix or ""])


def test_definitions_by_hand():
    # two responses: [1, 2, pad] and [3, pad, pad]; 3 tokens, 2 responses, constant length 4
    v, m = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(DEFINITIONS["token-mean"](v, m, 4)) == pytest.approx(6 / 3)
    assert float(DEFINITIONS["seq-mean-token-sum"](v, m, 4)) == pytest.approx((3 + 3) / 2)
    assert float(DEFINITIONS["seq-mean-token-mean"](v, m, 4)) == pytest.approx((1.5 + 3) / 2)
    assert float(DEFINITIONS["seq-mean-token-sum-norm"](v, m, 4)) == pytest.approx((3 + 3) / 2 / 4)
    for mode, fn in DEFINITIONS.items():  # and algos/reduce.py agrees on a batch reduced in one piece
        assert float(reduce_loss(v, m, mode, LossScale(3, 2, 4))) == pytest.approx(float(fn(v, m, 4))), mode


@pytest.mark.slow
def test_the_run_split_gives_the_single_batch_gradient(tmp_path, arith_data):
    r = run_check(context(tmp_path, arith_data, "actor_rollout_ref.actor.skip_zero_advantage=true"))
    assert r.status == PASS, text(r)
    t = text(r)
    assert "8 responses in 2 micro-batches of [4, 4] (ppo_micro_batch_size_per_gpu=4)" in t
    assert "the loss normaliser is loss_agg_mode=token-mean's definition" in t
    assert "leaving zero-advantage rows out leaves the gradient unchanged" in t
    assert "one optimiser step lowers the policy-gradient objective on the same batch" in t


@pytest.mark.slow
def test_two_gloo_ranks_give_the_one_rank_gradient(tmp_path, arith_data):
    r = run_check(context(tmp_path, arith_data, "trainer.n_gpus_per_node=2"))
    assert r.status == PASS, text(r)
    assert "2 data-parallel ranks give the 1-rank gradient" in text(r)
    assert "declared world 2 rank(s)" in text(r)


@pytest.mark.slow
def test_each_micro_batch_normalised_by_its_own_tokens_fails(tmp_path, arith_data, monkeypatch):
    real = Policy._micro_loss

    def own_count(self, micro, scale, ran):  # the seeded bug: a micro-batch's own count, not the mini-batch's
        return real(self, micro, LossScale.of(micro.seqs.response_mask, scale.norm_length), ran)

    monkeypatch.setattr(Policy, "_micro_loss", own_count)
    r = run_check(context(tmp_path, arith_data, "actor_rollout_ref.actor.skip_zero_advantage=false"))
    assert r.status == FAIL, text(r)
    assert "mis-scaled gradient accumulation: under the run's split the gradient is 2x the single-batch" in r.summary
    assert "8 responses in 2 micro-batches of [4, 4]" in text(r)
    assert "ppo_micro_batch_size_per_gpu" in r.fix


@pytest.mark.slow
def test_a_token_mean_over_responses_is_not_the_definition(tmp_path, arith_data, monkeypatch):
    def per_response(values, mask, mode, scale=None):  # the seeded bug: token-mean divides by the responses
        scale = scale or LossScale.of(mask)
        return reduce_loss(values, mask, "seq-mean-token-sum" if mode == "token-mean" else mode, scale)

    monkeypatch.setattr(policy_module, "reduce_loss", per_response)
    r = run_check(context(tmp_path, arith_data))
    assert r.status == FAIL, text(r)
    assert "the loss normaliser is not loss_agg_mode=token-mean's definition" in r.summary
    assert "gradient / single-batch gradient = 1.0000" in text(r)  # wrong but consistent: only the normaliser fails


@pytest.mark.slow
def test_a_step_against_the_gradient_fails(tmp_path, arith_data, monkeypatch):
    ctx = context(tmp_path, arith_data)
    run_plan = ctx.run_config(str(tmp_path / "run"), 1)
    cfg, plan = run_plan.config, run_plan.batch
    batch = twin_batch(cfg, plan)
    real = policy_module.clip_and_step

    def ascend(params, optimizer, grad_clip):  # the seeded bug: the step goes up the loss
        params = list(params)
        for p in params:
            if p.grad is not None:
                p.grad.neg_()
        return real(params, optimizer, grad_clip)

    monkeypatch.setattr(policy_module, "clip_and_step", ascend)
    r = step_lowers_loss(cfg, plan, batch)
    assert r.status == FAIL and "one optimiser step did not lower the policy-gradient objective" in r.summary, text(r)


@pytest.mark.slow
def test_zero_advantage_is_not_applicable_where_it_is_off(tmp_path, arith_data):
    from hybridrl.check.update import zero_advantage

    run_plan = context(tmp_path, arith_data, "actor_rollout_ref.actor.skip_zero_advantage=false").run_config(
        str(tmp_path / "run"), 1)
    cfg, plan = run_plan.config, run_plan.batch
    assert zero_advantage(cfg, plan, None, {}, [], "fp32").status == NA


@pytest.mark.slow
@pytest.mark.parametrize("loss_mode", ["vanilla", "cispo", "gpg", "sapo", "gspo"])
def test_a_correct_step_lowers_the_objective_under_every_policy_loss(tmp_path, arith_data, loss_mode):
    # CISPO's loss value is -A sg(clip(r)) log π: after a step its value moves with the detached weight, so the
    # check once called a correct CISPO step a failure (verl's CISPO GSM8K script); J = agg(-A r) is what descends
    ctx = context(tmp_path, arith_data, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
                  "actor_rollout_ref.actor.clip_ratio_low=10", "actor_rollout_ref.actor.clip_ratio_high=0.2")
    run_plan = ctx.run_config(str(tmp_path / "run"), 1)
    cfg, plan = run_plan.config, run_plan.batch
    r = step_lowers_loss(cfg, plan, twin_batch(cfg, plan))
    assert r.status == "pass", text(r)
