"""The RL driver loop: generate -> score -> log-probs/values -> advantages -> critic and actor updates
-> log/validate."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Optional

from hybridrl import progress, timeline
from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.algos.zero_advantage import rows_with_signal
from hybridrl.interrupt import StoppedEarly, failing_after, graceful
from hybridrl.timeline import TimelineWriter
from hybridrl.trainer import phases
from hybridrl.trainer.build import RLRun
from hybridrl.trainer.callbacks import Callbacks
from hybridrl.trainer.checkpoint import prune, restore, save_checkpoint
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
from hybridrl.trainer.old_policy import OldPolicy, old_policy
from hybridrl.trainer.phases import FrozenPasses
from hybridrl.trainer.validate import mean_val_score, validate


@dataclass
class RunSummary:
    steps: int
    val_before: Optional[float]  # mean validation score before the first step
    val_after: Optional[float]  # ... after the last step
    wall_s: float
    cpu_s: float
    last_step: int  # the run's step count when this call ended
    accuracy: bool = True  # the score is a rule's 0/1 (shown in %); False: a reward model's score (shown as is)

    def line(self) -> str:
        acc, name = "no validation", "validation accuracy" if self.accuracy else "validation reward-model score"
        show = (lambda v: f"{v:.1%}") if self.accuracy else (lambda v: f"{v:.4g}")
        if self.val_before is not None and self.val_after is not None:
            gain = (f"{100 * (self.val_after - self.val_before):+.1f} points" if self.accuracy
                    else f"{self.val_after - self.val_before:+.4g}")
            acc = f"{name} {show(self.val_before)} -> {show(self.val_after)} ({gain})"
        elif self.val_after is not None:
            acc = f"{name} {show(self.val_after)}"
        elif self.val_before is not None:
            acc = f"{name} {show(self.val_before)} before training, none after (trainer.test_freq <= 0)"
        return f"done: {self.steps} steps (at step {self.last_step}), {acc}, wall {self.wall_s:.0f}s (cpu {self.cpu_s:.0f}s)"


class RLTrainer:
    def __init__(self, run: RLRun, log=progress.write, callbacks: Optional[Callbacks] = None):
        self.r, self.log = run, log
        self.callbacks = callbacks or Callbacks()  # hybridrl.train's callbacks= (trainer/callbacks.py)
        self.estimator = ADV_ESTIMATORS.entry(run.loop.adv_estimator)
        self.signal = ZeroSignalWatch.of_run(run, self.estimator)
        self.timeline: Optional[TimelineWriter] = None
        self.dump = run.loop.dump_token_details and bool(run.loop.rollout_data_dir)  # the dump's per-token detail

    def fit(self) -> RunSummary:
        self.timeline = self.open_timeline()
        try:
            with progress.reporting() as shown:
                return self._fit(shown)
        finally:  # the scoring processes, loggers and worker processes, also when a step raises
            self.close_timeline()  # first: the workers' last spans are taken from them
            self.r.close()

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
        r.source.start(first)  # async: the rollout pool starts from the trainer's weights, generating ahead
        before = {}
        if r.loop.val_before_train and r.resume is None:  # a resumed run validated before its first step already
            with timeline.span("testing", step=0):
                before = self.validate(step=0)
        if before:
            r.tracker.log(before, step=0)
        after, test_freq = {}, r.loop.test_freq
        with graceful("the current step") as stop:  # Ctrl-C / SIGTERM: end after a whole step, with a checkpoint
            for step in shown.steps(first, r.total_steps):
                last = step == r.total_steps
                timeline.set_args(step=step)  # every span of the step says which it is
                with failing_after(stop, step):  # a child process that took the Ctrl-C too fails the step
                    metrics = self.train_step(step)
                    # as verl: every test_freq steps and at the last; test_freq <= 0 never (val_before_train aside)
                    if r.val_data is not None and test_freq > 0 and (last or step % test_freq == 0):
                        with timed(metrics, "testing"):
                            after = self.validate(step)
                        metrics.update(after)
                r.tracker.log(metrics, step)
                self.callbacks.step_end(step, metrics)
                if self.timeline is not None:  # every step (at most every few seconds): a crash leaves a file
                    self.timeline.flush()
                if (warning := self.signal.observe(metrics)) is not None:  # after the step's line, which it explains
                    self.log(warning)
                if r.checkpointing.due(step, last or stop.requested):  # after logging: its steps are in metrics.jsonl
                    self.save(step)
                if stop.requested and not last:
                    raise StoppedEarly(step, stop.signal_name, r.run_dir if r.checkpointing.save_freq != 0 else None)
        return RunSummary(r.total_steps - first + 1, mean_val_score(before), mean_val_score(after),
                          time.perf_counter() - wall, time.process_time() - cpu, r.total_steps,
                          accuracy=r.reward.reward_model is None)

    def save(self, step: int) -> None:
        r, start = self.r, time.perf_counter()
        with progress.phase("save_checkpoint"), timeline.span("save_checkpoint"):
            path = save_checkpoint(r, step)
            prune(r.run_dir, r.checkpointing.keep_actor, r.checkpointing.keep_critic)
        self.log(f"saved {path} ({time.perf_counter() - start:.1f}s)")
        self.callbacks.save(step, path)

    def open_timeline(self) -> Optional[TimelineWriter]:
        """trainer.profile_timeline: this process records as "driver" (the first track), the worker pools as
        "<pool> rank <r>" (distributed/group.py); None when off."""
        path, workers = self.r.loop.profile_timeline, self.r.workers
        if path is None:
            return None
        timeline.enable("driver", sort_index=-1)
        return TimelineWriter(path, [timeline.drain] + ([workers.timeline_events] if workers is not None else []))

    def close_timeline(self) -> None:
        """The last spans written; a failure here (a dead worker) is reported, not raised over the run's own error."""
        if self.timeline is None:
            return
        try:
            self.timeline.collect()
        except Exception as e:  # noqa: BLE001  the spans of the processes that answered are still written
            self.log(f"WARNING: trainer.profile_timeline: the workers' last spans are lost ({type(e).__name__}: "
                     f"{str(e).splitlines()[0][:200] if str(e) else ''})")
        try:
            self.timeline.write()
        except OSError as e:
            self.log(f"WARNING: trainer.profile_timeline={self.timeline.path}: cannot write it ({e.strerror or e})")
        timeline.disable()

    def train_step(self, step: int) -> dict[str, float]:
        """One step, a call per phase (DESIGN.md's driver loop): its metrics."""
        r, s, m = self.r, self.r.loop, {}
        with timed(m, "step"):
            # n responses per prompt, scored (DAPO: until enough groups are informative; async: the pool's batch)
            batch = r.source.next_batch(step, m)
            rollout, seqs, mask = batch.rollout, batch.rollout.sequences(), batch.rollout.response_mask
            # how π_old is obtained: none, the rollout's, recomputed now or for the rows with a gradient later
            old = old_policy(batch.behaviour, r.plan.on_policy, r.kl_ctrl is not None, s.rollout_rs is not None,
                             s.skip_zero_advantage)
            # the forwards of the models the update does not change: π_old, reference, teacher, values, baseline
            f = phases.frozen_passes(r, self.estimator, rollout, seqs, old, self.dump, m)
            token_rewards = phases.token_rewards(r, batch.reward.rewards, f, mask, m)  # with the in-reward KL
            adv = phases.advantages(r, self.estimator, rollout, token_rewards, f, m)  # pure, from the registry
            # the rows the update computes (None: all of them)
            with_signal = rows_with_signal(adv.advantages, mask) if s.skip_zero_advantage else None
            if old is OldPolicy.RECOMPUTE_WITH_SIGNAL:
                with timed(m, "old_log_prob"):
                    f.old = phases.old_log_probs_with_signal(r.policy, seqs, with_signal, rollout.rollout_log_probs)
            seqs = phases.rejected(r, seqs, f, rollout, m)  # rollout_rs: rejected tokens leave the loss
            if self.dump:
                phases.token_details(r, seqs, f, m)
            phases.update(r, step, seqs, rollout, adv, f, m)  # critic, then actor
            r.source.after_update(step, m)  # async: the new weights to the rollout pool
        m.update(data_metrics(rollout, batch.reward, token_rewards, adv, f.values, s.max_response_length))
        self.record(step, m, rollout, batch.reward, adv, with_signal, f)
        return m

    def record(self, step: int, m: dict[str, float], rollout, reward, adv, with_signal, f: FrozenPasses) -> None:
        """Throughput, MFU and memory metrics into `m`; with trainer.rollout_data_dir, the step's generations."""
        r, s, mask = self.r, self.r.loop, rollout.response_mask
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
                add_token_details(rows, rollout, r.tokenizer, f.dumped, f.entropy)
            dump_rows(s.rollout_data_dir, step, rows)

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
        return {**result.metrics, **self.callbacks.validation(step, result.metrics)}
