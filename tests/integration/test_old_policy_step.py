"""train_step obtains π_old as trainer/old_policy.old_policy decides, and only so: each answer is forced in turn
(monkeypatched) on one small on-policy GRPO run, and the log-prob passes the step makes, their place around the
advantages, and the π_old the update gets are checked against it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer import rl
from hybridrl.trainer.build import build_run
from hybridrl.trainer.old_policy import OldPolicy
from hybridrl.trainer.rl import RLTrainer

N = 16  # 4 prompts x 4 responses; only group 0's rewards differ (1, 0, 0, 0): its 4 rows have a gradient


def args(arith_data, model_dir, run_dir) -> list[str]:
    return [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
            f"actor_rollout_ref.model.path={model_dir}",
            "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "data.max_response_length=4",
            "trainer.total_training_steps=4", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.save_freq=0", "trainer.logger=[file]", f"trainer.default_local_dir={run_dir}"]


class Spy:
    """Records, in order, the policy's log-prob passes (rows computed), the advantages and the update's π_old."""

    def __init__(self, run, trainer):
        self.events, self.computed, self.old, self.rollout = [], [], None, None
        policy, estimator, source, reward = run.policy, trainer.estimator, run.source, run.reward
        log_probs, update, next_batch, score = policy.log_probs, policy.update, source.next_batch, reward.score

        def spied_log_probs(seqs):
            out = log_probs(seqs)
            self.events.append(("log_probs", len(seqs.input_ids)))
            self.computed.append(out)
            return out

        def spied_adv(*a):
            self.events.append("adv")
            return estimator.fn(*a)

        def spied_update(batch):
            self.events.append("update")
            self.old = batch.old_log_probs
            return update(batch)

        def spied_next_batch(step, m):
            batch = next_batch(step, m)
            self.rollout = batch.rollout
            return batch

        def one_informative_group(rollout):
            out = score(rollout)
            rewards = torch.zeros(len(rollout.uid))
            rewards[0] = 1.0
            return dataclasses.replace(out, rewards=rewards, scores=rewards)

        policy.log_probs, policy.update, source.next_batch = spied_log_probs, spied_update, spied_next_batch
        reward.score = one_informative_group
        trainer.estimator = dataclasses.replace(estimator, fn=spied_adv)

    def reset(self) -> None:
        self.events, self.computed = [], []


@pytest.mark.slow
def test_train_step_obtains_old_log_probs_as_the_function_says(arith_data, random_model_dir, tmp_path, monkeypatch):
    cfg = load_config(RLConfig, None, args(arith_data, random_model_dir, tmp_path / "run"))
    run = build_run(resolve(cfg), log=lambda *_: None)
    trainer = RLTrainer(run, log=lambda *_: None)
    spy, asked = Spy(run, trainer), []
    try:
        for step, answer in enumerate([OldPolicy.FIRST_FORWARD, OldPolicy.RECOMPUTE_ALL,
                                       OldPolicy.RECOMPUTE_WITH_SIGNAL, OldPolicy.ROLLOUT], start=1):
            monkeypatch.setattr(rl, "old_policy", lambda *inputs, answer=answer: asked.append(inputs) or answer)
            spy.reset()
            m = trainer.train_step(step)
            if answer is OldPolicy.FIRST_FORWARD:  # no pass: the update's first forward is π_old
                assert (spy.events, spy.old) == (["adv", "update"], None)
            elif answer is OldPolicy.RECOMPUTE_ALL:  # every row, before the advantages
                assert spy.events == [("log_probs", N), "adv", "update"]
                assert spy.old is spy.computed[0]
            elif answer is OldPolicy.RECOMPUTE_WITH_SIGNAL:  # after the advantages, group 0's 4 rows only
                assert spy.events == ["adv", ("log_probs", 4), "update"]
                assert torch.equal(spy.old[:4], spy.computed[0])
                assert torch.equal(spy.old[4:], spy.rollout.rollout_log_probs[4:])  # placeholders, never in the loss
            else:  # the rollout's own log-probs, no pass
                assert (spy.events, spy.old is spy.rollout.rollout_log_probs) == (["adv", "update"], True)
            assert ("timing_s/old_log_prob" in m) == (answer in (OldPolicy.RECOMPUTE_ALL,
                                                                 OldPolicy.RECOMPUTE_WITH_SIGNAL))
    finally:
        run.close()
    # asked with the batch's behaviour (sync: None), plan.on_policy, in-reward KL, rollout_rs, skip_zero_advantage
    assert asked == [(None, True, False, False, True)] * 4
