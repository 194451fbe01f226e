"""The RL driver loop: generate -> score -> log-probs/values -> advantages -> critic and actor updates
-> log/validate."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from hybridrl import progress
from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs
from hybridrl.algos.kl_ctrl import apply_kl_penalty
from hybridrl.algos.rollout_correction import rejection_metrics, rollout_rs_keep
from hybridrl.algos.zero_advantage import rows_with_signal
from hybridrl.batch import TrainBatch, select
from hybridrl.interrupt import StoppedEarly, failing_after, graceful
from hybridrl.rewards.manager import on_last_token
from hybridrl.trainer.build import RLRun
from hybridrl.trainer.checkpoint import prune, restore, save_checkpoint
from hybridrl.trainer.collect import collect_rollout, greedy_baseline
from hybridrl.trainer.generations import add_token_details, dump_rows, generation_rows
from hybridrl.trainer.learning_signal import ZeroSignalWatch
from hybridrl.trainer.metrics import (
    actor_mfu,
    data_metrics,
    memory_metrics,
    throughput_metrics,
    timed,
    timing_per_token_metrics,
)
from hybridrl.trainer.validate import mean_val_score, validate
from hybridrl.workers.critic import CriticBatch


@dataclass
class RunSummary:
    steps: int
    val_before: Optional[float]  # mean validation score before the first step
    val_after: Optional[float]  # ... after the last step
    wall_s: float
    cpu_s: float
    last_step: int  # the run's step count when this call ended

    def line(self) -> str:
        acc = "no validation"
        if self.val_before is not None and self.val_after is not None:
            acc = (f"validation accuracy {self.val_before:.1%} -> {self.val_after:.1%} "
                   f"({100 * (self.val_after - self.val_before):+.1f} points)")
        elif self.val_after is not None:
            acc = f"validation accuracy {self.val_after:.1%}"
        elif self.val_before is not None:
            acc = f"validation accuracy {self.val_before:.1%} before training, none after (trainer.test_freq <= 0)"
        return f"done: {self.steps} steps (at step {self.last_step}), {acc}, wall {self.wall_s:.0f}s (cpu {self.cpu_s:.0f}s)"


def old_log_probs_with_signal(policy, seqs, signal: Tensor, rollout_log_probs: Tensor) -> Tensor:
    """[N, T] π_old of the rows the update computes (`signal`, bool [N]: a non-zero advantage somewhere); the
    rows it leaves out (algos/zero_advantage.py) never reach the loss and keep the engine's log-probs, finite
    placeholders."""
    rows = signal.nonzero()[:, 0]
    if len(rows) == len(signal):
        return policy.log_probs(seqs)
    out = rollout_log_probs.clone()
    if len(rows):
        out[rows] = policy.log_probs(select(seqs, rows))
    return out


class RLTrainer:
    def __init__(self, run: RLRun, log=progress.write):
        self.r, self.log = run, log
        self.estimator = ADV_ESTIMATORS.entry(run.loop.adv_estimator)
        self.signal = ZeroSignalWatch.of_run(run, self.estimator)

    def fit(self) -> RunSummary:
        try:
            with progress.reporting() as shown:
                return self._fit(shown)
        finally:  # the scoring processes, loggers and worker processes, also when a step raises
            self.r.reward.close()
            self.r.tracker.close()
            if self.r.workers is not None:
                self.r.workers.close()
            else:
                self.r.policy.close()  # the rollout engine's own processes (vllm)
            if self.r.lock is not None:
                self.r.lock.release()  # last: the folder is free once nothing writes to it

    def _fit(self, shown: progress.Reporter) -> RunSummary:
        r, wall, cpu = self.r, time.perf_counter(), time.process_time()
        first = 1
        if r.resume is not None:
            p = r.resume
            if p.step >= r.total_steps:
                self.log(f"{p.path}: the run already finished (step {p.step} of {r.total_steps}); nothing to train. "
                         "Raise trainer.total_training_steps to continue, or set trainer.resume_mode=disable to start over")
                return RunSummary(0, None, None, time.perf_counter() - wall, time.process_time() - cpu, p.step)
            restore(r, p)
            self.log(f"resumed from step {p.step} (epoch {p.epoch}, sample {p.sample}) of {p.path}")
            first = p.step + 1
        # a resumed run validated before its first step already
        before = self.validate(step=0) if r.loop.val_before_train and r.resume is None else {}
        if before:
            r.tracker.log(before, step=0)
        after, test_freq = {}, r.loop.test_freq
        with graceful("the current step") as stop:  # Ctrl-C / SIGTERM: end after a whole step, with a checkpoint
            for step in shown.steps(first, r.total_steps):
                last = step == r.total_steps
                with failing_after(stop, step):  # a child process that took the Ctrl-C too fails the step
                    metrics = self.train_step(step)
                    # as verl: every test_freq steps and at the last; test_freq <= 0 never (val_before_train aside)
                    if r.val_data is not None and test_freq > 0 and (last or step % test_freq == 0):
                        with timed(metrics, "testing"):
                            after = self.validate(step)
                        metrics.update(after)
                r.tracker.log(metrics, step)
                if (warning := self.signal.observe(metrics)) is not None:  # after the step's line, which it explains
                    self.log(warning)
                if r.checkpointing.due(step, last or stop.requested):  # after logging: its steps are in metrics.jsonl
                    self.save(step)
                if stop.requested and not last:
                    raise StoppedEarly(step, stop.signal_name, r.run_dir if r.checkpointing.save_freq != 0 else None)
        return RunSummary(r.total_steps - first + 1, mean_val_score(before), mean_val_score(after),
                          time.perf_counter() - wall, time.process_time() - cpu, r.total_steps)

    def save(self, step: int) -> None:
        r, start = self.r, time.perf_counter()
        with progress.phase("save_checkpoint"):
            path = save_checkpoint(r, step)
            prune(r.run_dir, r.checkpointing.keep_actor, r.checkpointing.keep_critic)
        self.log(f"saved {path} ({time.perf_counter() - start:.1f}s)")

    def train_step(self, step: int) -> dict[str, float]:
        r, s, m = self.r, self.r.loop, {}
        with timed(m, "step"):
            # generate n responses per prompt and score them (DAPO: until enough groups are informative)
            rollout, reward = collect_rollout(r, s.n, r.plan.prompts_per_step, s.group_filter, m)
            seqs, mask = rollout.sequences(), rollout.response_mask
            old_lp = ref_lp = values = baselines = None
            needs_old = not r.plan.on_policy or r.kl_ctrl is not None or s.rollout_rs is not None
            # π_old, frozen before any update; left until the advantages are known when only the rows with a
            # gradient need it (the in-reward KL and the rejection band, which sets the normaliser, need every row's)
            later = needs_old and s.skip_zero_advantage and r.kl_ctrl is None and s.rollout_rs is None
            dump = s.dump_token_details and bool(s.rollout_data_dir)
            entropy = None  # [N, T] the dump's per-token entropy, from the forward that gives π_old
            if needs_old and not later:
                with timed(m, "old_log_prob"):
                    old_lp, entropy = r.policy.log_probs_and_entropy(seqs) if dump else (r.policy.log_probs(seqs), None)
            if r.reference is not None:  # only when a KL term is used
                with timed(m, "ref"):
                    ref_lp = r.reference.log_probs(seqs)
            if r.critic is not None:  # gae: V(s_t) of the policy that sampled the batch
                with timed(m, "values"):
                    values = r.critic.values(seqs)
            if self.estimator.meta.get("needs_greedy_baseline"):  # remax: one greedy response per prompt
                with timed(m, "gen_max"):
                    baselines = greedy_baseline(r.policy, r.reward, rollout, s.n, r.sampling)
            token_rewards = on_last_token(reward.rewards, mask)
            if r.kl_ctrl is not None:  # r_t - beta * KL_t (RLHF's KL-shaped reward)
                token_rewards, kl = apply_kl_penalty(token_rewards, old_lp, ref_lp, mask, s.kl_penalty, r.kl_ctrl.value)
                m.update({"actor/reward_kl_penalty": kl, "actor/reward_kl_penalty_coeff": r.kl_ctrl.value})
                r.kl_ctrl.update(kl, n_steps=len(mask))
            with timed(m, "adv"):  # pure function from the registry
                adv = self.estimator.fn(AdvantageInputs(token_rewards, mask, rollout.uid, values, baselines), r.adv_params)
            # the rows the update computes (None: all of them)
            with_signal = rows_with_signal(adv.advantages, mask) if s.skip_zero_advantage else None
            if later:
                with timed(m, "old_log_prob"):
                    old_lp = old_log_probs_with_signal(r.policy, seqs, with_signal, rollout.rollout_log_probs)
            if s.rollout_rs is not None:  # rejected tokens leave the loss and its normaliser, as padding would
                keep = rollout_rs_keep(old_lp, rollout.rollout_log_probs, mask, s.rollout_rs)
                m.update(rejection_metrics(mask, keep))
                seqs = dataclasses.replace(seqs, response_mask=keep)
            trainer_lp = old_lp if entropy is not None else None
            if dump and entropy is None:  # π_old as the trainer computes it, before the update (one forward)
                with timed(m, "token_details"):
                    trainer_lp, entropy = r.policy.log_probs_and_entropy(seqs)
            if r.critic is not None:
                with timed(m, "update_critic"):
                    m.update(r.critic.update(CriticBatch(seqs, values, adv.returns)))
            if step > s.critic_warmup:  # mini-batches x micro-batches x epochs, grad clip
                with timed(m, "update_actor"):
                    m.update(r.policy.update(TrainBatch(seqs, adv.advantages, rollout.rollout_log_probs, old_lp, ref_lp)))
        m.update(data_metrics(rollout, reward, token_rewards, adv, values, s.max_response_length))
        m.update(throughput_metrics(rollout, m["timing_s/step"], r.plan.world_size))
        m.update(timing_per_token_metrics(m, rollout))
        if "timing_s/update_actor" in m:
            m.update(actor_mfu(r.model_shape, rollout, r.plan.ppo_epochs, m["timing_s/update_actor"], r.plan.world_size,
                               s.share_prompts, with_signal))
        m.update(memory_metrics())
        if s.rollout_data_dir:  # every generation of the step, with its sequence advantage (mean over tokens)
            seq_adv = ((adv.advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
            rows = generation_rows(rollout, reward, r.tokenizer, seq_adv)
            if s.dump_token_details:
                add_token_details(rows, rollout, r.tokenizer, trainer_lp, entropy)
            dump_rows(s.rollout_data_dir, step, rows)
        return m

    def validate(self, step: int) -> dict[str, float]:
        """Validation metrics; the generations go to trainer.validation_data_dir and, the first
        trainer.log_val_generations of them, to the loggers."""
        r, s = self.r, self.r.loop
        if r.val_data is None:
            return {}
        generate = functools.partial(r.policy.generate, stream="val")  # its own sampling counter
        result = validate(generate, r.val_data, r.reward, r.val_sampling, s.val_n, r.pad_id)
        if s.validation_data_dir:
            dump_rows(s.validation_data_dir, step, result.rows)
        if s.log_val_generations > 0:
            keep = ("input", "output", "gts", "score")
            r.tracker.log_generations([{k: row[k] for k in keep} for row in result.rows[:s.log_val_generations]], step)
        return result.metrics
