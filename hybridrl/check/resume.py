"""The resume check: a twin run killed after a checkpoint and resumed equals the uninterrupted one.

The uninterrupted run is twin_run.straight_run (3 steps, a checkpoint after each; an epoch is 2 steps). The
killed run is its folder as a SIGKILL in step 3 leaves it: step 3's metrics line written, its checkpoint
half-saved (a temporary folder without its manifest), `latest` naming step 2. Then `hybridrl train`'s own path
runs on that folder again (resume_mode=auto): it must resume from step 2, drop the stale line of step 3 and
train step 3 again, to the same metrics and weights. The resume point is an epoch boundary (step 3 starts epoch
1), where verl PR#5725's resume trained 0 steps and exited 0. With async rollouts on, that run is synchronous
(twin_run.py), and resume_async.py then proves the in-flight buffer policy on the real async dataflow.
"""

from __future__ import annotations

from hybridrl.check.registry import check
from hybridrl.check.result import Result, combine
from hybridrl.check.resume_async import async_part
from hybridrl.check.resume_proofs import as_killed, epoch_boundary, resumed_the_rest, same_metrics, same_weights
from hybridrl.check.twin_run import fresh_dir, held, run_changes, straight_run, train
from hybridrl.config.async_checks import async_enabled


@check("resume")
def resume(ctx) -> Result:
    """A run killed after a checkpoint and resumed logs the same metrics and ends with the same weights as the
    uninterrupted run, and trains the steps it had left (at an epoch boundary too, where verl's resume trained 0).

    The twin trains 3 steps straight; a copy of its folder as a kill in step 3 leaves it (after its metrics line,
    during its checkpoint's save) is trained again, resuming from step 2's checkpoint, where epoch 1 starts. With
    async rollouts on, the same on a Ray rollout pool proves the README's in-flight buffer policy: the batches in
    flight are dropped, the checkpoint's weights pushed (version = its step) and the next step regenerated (lag 0)
    from the same prompts and draw keys; at staleness 0 the resumed run equals the uninterrupted one."""
    straight = straight_run(ctx)
    steps, last_ckpt = straight.steps, straight.steps - 1
    run_dir, lines = fresh_dir(ctx.work_dir, "killed"), []
    as_killed(straight.run_dir, run_dir, steps)
    run, summary = train(ctx.run_config(run_dir, steps, **run_changes(ctx)), lines)  # `hybridrl train` again: resume_mode=auto
    parts = [resumed_the_rest(run, summary, run_dir, last_ckpt, steps), same_metrics(straight.run_dir, run_dir, steps),
             same_weights(straight, run_dir), epoch_boundary(straight.run_dir, last_ckpt)]
    if async_enabled(ctx.cfg):  # the synchronous run above, then the in-flight buffer policy on the real dataflow
        parts += async_part(ctx)
    result = combine(parts, f"killed in step {steps} and resumed from step {last_ckpt}'s checkpoint, the run equals "
                            f"the uninterrupted one" + (" (async rollouts: the in-flight buffer policy holds)"
                                                        if async_enabled(ctx.cfg) else ""))
    if result.status == "fail":
        result.details = held(parts) + result.details
    result.details += straight.notes
    return result
