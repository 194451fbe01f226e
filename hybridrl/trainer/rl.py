"""The RL driver loop: generate -> score -> log-probs -> advantages -> update -> log/validate."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from tqdm import tqdm

from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs
from hybridrl.batch import TrainBatch
from hybridrl.trainer.build import RLRun
from hybridrl.trainer.metrics import data_metrics, throughput_metrics, timed
from hybridrl.trainer.validate import mean_val_score, validate


@dataclass
class RunSummary:
    steps: int
    val_before: Optional[float]  # mean validation score before the first step
    val_after: Optional[float]  # ... after the last step
    wall_s: float
    cpu_s: float

    def line(self) -> str:
        acc = "no validation"
        if self.val_before is not None and self.val_after is not None:
            acc = (f"validation accuracy {self.val_before:.1%} -> {self.val_after:.1%} "
                   f"({100 * (self.val_after - self.val_before):+.1f} points)")
        return f"done: {self.steps} steps, {acc}, wall {self.wall_s:.0f}s (cpu {self.cpu_s:.0f}s)"


class RLTrainer:
    def __init__(self, run: RLRun, adv_estimator: str, n: int, val_n: int, test_freq: int,
                 val_before_train: bool, max_response_length: int):
        self.r = run
        self.estimator = ADV_ESTIMATORS.get(adv_estimator)
        self.n, self.val_n, self.test_freq = n, val_n, test_freq
        self.val_before_train, self.max_response_length = val_before_train, max_response_length

    def fit(self) -> RunSummary:
        wall, cpu = time.perf_counter(), time.process_time()
        before = self.validate() if self.val_before_train else {}
        if before:
            self.r.tracker.log(before, step=0)
        after = before
        for step in tqdm(range(1, self.r.total_steps + 1), desc="training", unit="step", dynamic_ncols=True):
            metrics = self.train_step()
            last = step == self.r.total_steps
            if self.r.val_data is not None and (last or (self.test_freq > 0 and step % self.test_freq == 0)):
                with timed(metrics, "testing"):
                    after = self.validate()
                metrics.update(after)
            self.r.tracker.log(metrics, step)
        self.r.tracker.close()
        return RunSummary(self.r.total_steps, mean_val_score(before), mean_val_score(after),
                          time.perf_counter() - wall, time.process_time() - cpu)

    def train_step(self) -> dict[str, float]:
        r, m = self.r, {}
        with timed(m, "step"):
            prompts = r.train_data.collate(r.sampler.next_batch(), r.pad_id)
            with timed(m, "gen"):  # sample n responses per prompt, keeping their log-probs
                rollout = r.policy.generate(prompts, self.n, r.sampling)
            with timed(m, "reward"):  # decode and score; the score sits on the last token
                rewards = r.reward.score(rollout)
            seqs = rollout.sequences()
            old_lp = ref_lp = None
            if not r.plan.on_policy:  # several optimizer steps per batch: freeze π_old first
                with timed(m, "old_log_prob"):
                    old_lp = r.policy.log_probs(seqs)
            if r.reference is not None:  # only when a KL term is used
                with timed(m, "ref"):
                    ref_lp = r.reference.log_probs(seqs)
            with timed(m, "adv"):  # pure function from the registry
                adv = self.estimator(AdvantageInputs(rewards.token_level_scores, rollout.response_mask, rollout.uid),
                                     r.adv_params)
            with timed(m, "update_actor"):  # mini-batches x micro-batches x epochs, grad clip
                m.update(r.policy.update(TrainBatch(seqs, adv.advantages, rollout.rollout_log_probs, old_lp, ref_lp)))
        m.update(data_metrics(rollout, rewards.scores, adv.advantages, adv.returns, self.max_response_length))
        m.update(throughput_metrics(rollout, m["timing_s/step"], r.plan.world_size))
        return m

    def validate(self) -> dict[str, float]:
        if self.r.val_data is None:
            return {}
        return validate(self.r.policy.engine, self.r.val_data, self.r.reward, self.r.val_sampling, self.val_n, self.r.pad_id)
