"""The phases of one RL step between its batch and the weight sync, each a function that trainer/rl.py's
`train_step` calls once, in this order: the frozen passes, the rewards (with the in-reward KL), the advantages,
π_old of the rows with a gradient (when it waited for them), the rejection band, the dump's token details, the
updates. Each phase is timed into the step's metrics `m` (timing_s/<phase>) and runs only when the run uses it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from hybridrl.algos.advantages import AdvantageInputs, AdvantageOutput
from hybridrl.algos.distill import teacher_metrics, without_task_advantages
from hybridrl.algos.kl_ctrl import apply_kl_penalty
from hybridrl.algos.rollout_correction import rejection_metrics, rollout_rs_keep
from hybridrl.batch import Rollout, Sequences, TrainBatch, select
from hybridrl.rewards.manager import on_last_token
from hybridrl.trainer.build import RLRun
from hybridrl.trainer.collect import greedy_baseline
from hybridrl.trainer.metrics import timed
from hybridrl.trainer.old_policy import OldPolicy
from hybridrl.trainer.settings import DistillSettings
from hybridrl.workers.critic import CriticBatch


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


def frozen_passes(r: RLRun, estimator, rollout: Rollout, seqs: Sequences, old: OldPolicy, dump: bool,
                  m: dict[str, float]) -> FrozenPasses:
    """The forwards of models that do not change this step (π_old when `old` computes it for every row before the
    advantages, the reference, the teacher, the critic's values, remax's greedy baseline), each only when the run
    uses it; with `dump` the π_old forward also gives the per-token entropy the dump writes. `estimator`: the
    advantage estimator's registry entry."""
    f = FrozenPasses()
    if old is OldPolicy.RECOMPUTE_ALL:
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
    if estimator.meta.get("needs_greedy_baseline"):  # remax: one greedy response per prompt
        with timed(m, "gen_max"):
            f.baselines = greedy_baseline(r.policy, r.reward, rollout, r.loop.n, r.sampling)
    if old is OldPolicy.ROLLOUT:  # an older async batch: its behaviour policy is π_old
        f.old = rollout.rollout_log_probs
    return f


def token_rewards(r: RLRun, rewards: Tensor, f: FrozenPasses, mask: Tensor, m: dict[str, float]) -> Tensor:
    """[N, T] the sequence rewards on each response's last token; with algorithm.use_kl_in_reward r_t - β KL_t
    (RLHF's KL-shaped reward, against π_old), and β adapted."""
    shaped = on_last_token(rewards, mask)
    if r.kl_ctrl is None:
        return shaped
    shaped, kl = apply_kl_penalty(shaped, f.old, f.ref, mask, r.loop.kl_penalty, r.kl_ctrl.value)
    m.update({"actor/reward_kl_penalty": kl, "actor/reward_kl_penalty_coeff": r.kl_ctrl.value})
    r.kl_ctrl.update(kl, n_steps=len(mask))
    return shaped


def advantages(r: RLRun, estimator, rollout: Rollout, rewards: Tensor, f: FrozenPasses,
               m: dict[str, float]) -> AdvantageOutput:
    """The registry's estimator on the token rewards (a pure function), then distillation's driver side."""
    with timed(m, "adv"):
        adv = estimator.fn(AdvantageInputs(rewards, rollout.response_mask, rollout.uid, f.values, f.baselines),
                           r.adv_params)
    if r.loop.distill is None:
        return adv
    student = rollout.rollout_log_probs if f.old is None else f.old
    return distill_advantages(r.loop.distill, adv, student, f.teacher, rollout.response_mask, m)


def distill_advantages(d: DistillSettings, adv: AdvantageOutput, student_lp: Tensor, teacher_lp: Tensor, mask: Tensor,
                       m: dict[str, float]) -> AdvantageOutput:
    """On-policy distillation's driver side: the distill/* metrics of the student's samples (student_lp: π_old, or
    the engine's log-probs when π_old is not recomputed), and with use_task_rewards=false the reward's advantages
    set to 0, so the actor's distillation loss trains alone (the critic, if any, still fits the returns)."""
    m.update(teacher_metrics(student_lp, teacher_lp, mask, d.estimator))
    return adv if d.use_task_rewards else dataclasses.replace(adv, advantages=without_task_advantages(adv.advantages))


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


def rejected(r: RLRun, seqs: Sequences, f: FrozenPasses, rollout: Rollout, m: dict[str, float]) -> Sequences:
    """With algorithm.rollout_correction.rollout_rs, `seqs` whose response mask leaves out the tokens the band
    rejects (out of the loss and its normaliser, as padding would be); else `seqs`."""
    if r.loop.rollout_rs is None:
        return seqs
    keep = rollout_rs_keep(f.old, rollout.rollout_log_probs, rollout.response_mask, r.loop.rollout_rs)
    m.update(rejection_metrics(rollout.response_mask, keep))
    return dataclasses.replace(seqs, response_mask=keep)


def token_details(r: RLRun, seqs: Sequences, f: FrozenPasses, m: dict[str, float]) -> None:
    """trainer.dump_token_details: π_old as the trainer computes it, before the update, and its entropy, into `f`
    (one forward, unless the π_old pass already gave both)."""
    if f.entropy is None:
        with timed(m, "token_details"):
            f.dumped, f.entropy = r.policy.log_probs_and_entropy(seqs)
    else:
        f.dumped = f.old


def update(r: RLRun, step: int, seqs: Sequences, rollout: Rollout, adv: AdvantageOutput, f: FrozenPasses,
           m: dict[str, float]) -> None:
    """The critic's update, then (after trainer.critic_warmup steps) the actor's: mini-batches x micro-batches x
    epochs, grad clip; their metrics into `m`."""
    if r.critic is not None:
        with timed(m, "update_critic"):
            m.update(r.critic.update(CriticBatch(seqs, f.values, adv.returns)))
    if step > r.loop.critic_warmup:
        with timed(m, "update_actor"):
            m.update(r.policy.update(TrainBatch(seqs, adv.advantages, rollout.rollout_log_probs, f.old, f.ref,
                                                f.teacher)))
