"""The RL driver loop: generate -> score -> log-probs/values -> advantages -> critic and actor updates
-> log/validate."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from hybridrl import progress, timeline
from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs, AdvantageOutput
from hybridrl.algos.distill import teacher_metrics, without_task_advantages
from hybridrl.algos.kl_ctrl import apply_kl_penalty
from hybridrl.algos.rollout_correction import rejection_metrics, rollout_rs_keep
from hybridrl.algos.zero_advantage import rows_with_signal
from hybridrl.batch import TrainBatch, select
from hybridrl.interrupt import StoppedEarly, failing_after, graceful
from hybridrl.rewards.manager import on_last_token
from hybridrl.timeline import TimelineWriter
from hybridrl.trainer.build import DistillSettings, RLRun
from hybridrl.trainer.callbacks import Callbacks
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


def distill_advantages(d: DistillSettings, adv: AdvantageOutput, student_lp: Tensor, teacher_lp: Tensor, mask: Tensor,
                       m: dict[str, float]) -> AdvantageOutput:
    """On-policy distillation's driver side: the distill/* metrics of the student's samples (student_lp: π_old, or
    the engine's log-probs when π_old is not recomputed), and with use_task_rewards=false the reward's advantages
    set to 0, so the actor's distillation loss trains alone (the critic, if any, still fits the returns)."""
    m.update(teacher_metrics(student_lp, teacher_lp, mask, d.estimator))
    return adv if d.use_task_rewards else dataclasses.replace(adv, advantages=without_task_advantages(adv.advantages))


@dataclass
class FrozenPasses:
    """[N, T] outputs of the passes before the update; None where the run has no such pass."""

    old: Optional[Tensor] = None  # log π_old (None: on-policy, the update's first forward is π_old)
    ref: Optional[Tensor] = None  # log π_ref
    teacher: Optional[Tensor] = None  # log π_teacher (distillation)
    values: Optional[Tensor] = None  # V(s_t)
    baselines: Optional[Tensor] = None  # [N] remax's greedy rewards
    dumped: Optional[Tensor] = None  # trainer.dump_token_details: the trainer's log-probs written with the samples
    entropy: Optional[Tensor] = None  # ... and its per-token entropy, from the same forward


class RLTrainer:
    def __init__(self, run: RLRun, log=progress.write, callbacks: Optional[Callbacks] = None):
        self.r, self.log = run, log
        self.callbacks = callbacks or Callbacks()  # hybridrl.train's callbacks= (trainer/callbacks.py)
        self.estimator = ADV_ESTIMATORS.entry(run.loop.adv_estimator)
        self.signal = ZeroSignalWatch.of_run(run, self.estimator)
        self.timeline: Optional[TimelineWriter] = None

    def fit(self) -> RunSummary:
        self.timeline = self.open_timeline()
        try:
            with progress.reporting() as shown:
                return self._fit(shown)
        finally:  # the scoring processes, loggers and worker processes, also when a step raises
            self.close_timeline()  # first: the workers' last spans are taken from them
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
        if r.rollouts is not None:  # async: the rollout pool starts from the trainer's weights, generating ahead
            r.rollouts.start(first)
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
        r, s, m = self.r, self.r.loop, {}
        with timed(m, "step"):
            # generate n responses per prompt and score them (DAPO: until enough groups are informative)
            rollout, reward = collect_rollout(r, s.n, r.plan.prompts_per_step, s.group_filter, m)
            seqs, mask = rollout.sequences(), rollout.response_mask
            # async, a batch of older weights: π_old is the rollout's log-probs, or ("prox") recomputed here
            behaviour = r.rollouts.behaviour if r.rollouts is not None else None
            needs_old = behaviour != "rollout" and (not r.plan.on_policy or r.kl_ctrl is not None
                                                     or s.rollout_rs is not None or behaviour == "prox")
            # π_old, frozen before any update; left until the advantages are known when only the rows with a
            # gradient need it (the in-reward KL and the rejection band, which sets the normaliser, need every row's)
            later = needs_old and s.skip_zero_advantage and r.kl_ctrl is None and s.rollout_rs is None
            dump = s.dump_token_details and bool(s.rollout_data_dir)  # the dump's per-token detail
            f = self.frozen_passes(rollout, seqs, needs_old and not later, dump, m)
            if behaviour == "rollout":
                f.old = rollout.rollout_log_probs
            token_rewards = on_last_token(reward.rewards, mask)
            if r.kl_ctrl is not None:  # r_t - beta * KL_t (RLHF's KL-shaped reward)
                token_rewards, kl = apply_kl_penalty(token_rewards, f.old, f.ref, mask, s.kl_penalty, r.kl_ctrl.value)
                m.update({"actor/reward_kl_penalty": kl, "actor/reward_kl_penalty_coeff": r.kl_ctrl.value})
                r.kl_ctrl.update(kl, n_steps=len(mask))
            with timed(m, "adv"):  # pure function from the registry
                adv = self.estimator.fn(AdvantageInputs(token_rewards, mask, rollout.uid, f.values, f.baselines),
                                        r.adv_params)
            if s.distill is not None:
                adv = distill_advantages(s.distill, adv, rollout.rollout_log_probs if f.old is None else f.old,
                                         f.teacher, mask, m)
            # the rows the update computes (None: all of them)
            with_signal = rows_with_signal(adv.advantages, mask) if s.skip_zero_advantage else None
            if later:
                with timed(m, "old_log_prob"):
                    f.old = old_log_probs_with_signal(r.policy, seqs, with_signal, rollout.rollout_log_probs)
            if s.rollout_rs is not None:  # rejected tokens leave the loss and its normaliser, as padding would
                keep = rollout_rs_keep(f.old, rollout.rollout_log_probs, mask, s.rollout_rs)
                m.update(rejection_metrics(mask, keep))
                seqs = dataclasses.replace(seqs, response_mask=keep)
            if dump and f.entropy is None:  # π_old as the trainer computes it, before the update (one forward)
                with timed(m, "token_details"):
                    f.dumped, f.entropy = r.policy.log_probs_and_entropy(seqs)
            elif dump:
                f.dumped = f.old
            if r.critic is not None:
                with timed(m, "update_critic"):
                    m.update(r.critic.update(CriticBatch(seqs, f.values, adv.returns)))
            if step > s.critic_warmup:  # mini-batches x micro-batches x epochs, grad clip
                with timed(m, "update_actor"):
                    m.update(r.policy.update(TrainBatch(seqs, adv.advantages, rollout.rollout_log_probs, f.old, f.ref,
                                                        f.teacher)))
            if r.rollouts is not None:  # async: every trigger_parameter_sync_step steps, the weights to the pool
                with timed(m, "sync_rollout_weights"):
                    r.rollouts.after_update(step)
        m.update(data_metrics(rollout, reward, token_rewards, adv, f.values, s.max_response_length))
        self.record(step, m, rollout, reward, adv, with_signal, f)
        return m

    def frozen_passes(self, rollout, seqs, old: bool, dump: bool, m: dict[str, float]) -> "FrozenPasses":
        """The forwards of models that do not change this step (π_old when `old`, the reference, the teacher, the
        critic's values, remax's greedy baseline), each only when the run uses it; with `dump` the π_old forward
        also gives the per-token entropy the dump writes."""
        r, f = self.r, FrozenPasses()
        if old:
            with timed(m, "old_log_prob"):
                f.old, f.entropy = r.policy.log_probs_and_entropy(seqs) if dump else (r.policy.log_probs(seqs), None)
        if r.reference is not None:  # only when a KL term is used
            with timed(m, "ref"):
                f.ref = r.reference.log_probs(seqs)
        if r.teacher is not None:  # on-policy distillation: the frozen teacher scores the student's tokens
            with timed(m, "teacher"):
                f.teacher = r.teacher.log_probs(seqs)
        if r.critic is not None:  # gae: V(s_t) of the policy that sampled the batch
            with timed(m, "values"):
                f.values = r.critic.values(seqs)
        if self.estimator.meta.get("needs_greedy_baseline"):  # remax: one greedy response per prompt
            with timed(m, "gen_max"):
                f.baselines = greedy_baseline(r.policy, r.reward, rollout, r.loop.n, r.sampling)
        return f

    def record(self, step: int, m: dict[str, float], rollout, reward, adv, with_signal, f: "FrozenPasses") -> None:
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
