"""The `resume` check passes on a correct setup (a twin of tiny-arith killed in step 3 and resumed from step 2's
checkpoint, an epoch boundary, equals the uninterrupted run), and reports ✗ naming the step and what differs for
the resume bugs it exists for, seeded by patching our own checkpoint restore: a resume point one step late (the
run "resumes" at the end and trains 0 steps, verl PR#5725's symptom) and a restore that skips a batch."""

from __future__ import annotations

import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import CHECKS
from hybridrl.check.resume_proofs import metric_rows
from hybridrl.check.result import FAIL, PASS
from hybridrl.check.runner import _run_one
from hybridrl.trainer import checkpoint

pytestmark = pytest.mark.slow


def context(tmp_path, arith_data, *overrides: str) -> CheckContext:
    return CheckContext(None, ["actor_rollout_ref.model.path=tiny-arith", f"data.train_files=[{arith_data['train']}]",
                               f"data.val_files=[{arith_data['val']}]", *overrides], str(tmp_path / "work"))


def run_check(name: str, ctx: CheckContext):
    """The check as `hybridrl check` runs it (an exception is a ✗, not a crash)."""
    import hybridrl.check.export  # noqa: F401  (register the checks)
    import hybridrl.check.resume  # noqa: F401

    return _run_one(CHECKS.entry(name), ctx)


def test_killed_and_resumed_at_an_epoch_boundary_equals_the_uninterrupted_run_and_exports(tmp_path, arith_data):
    ctx = context(tmp_path, arith_data)
    r = run_check("resume", ctx)
    assert r.status == PASS, r
    text = "\n".join([r.summary, *r.details])
    assert "killed in step 3 and resumed from step 2's checkpoint, the run equals the uninterrupted one" in text
    assert "resumed from step 2 (epoch 0, sample 2) and trained step 3" in text
    assert "step 3, the first resumed step, starts epoch 1: an epoch boundary" in text
    assert "metric values in steps 1-3 (timings aside)" in text
    assert "the same final weights (actor: " in text and "max |difference| 0)" in text
    assert "stand-in reward" in text  # the weights moved: the comparison is not of untouched weights
    rows = metric_rows(str(tmp_path / "work" / "runs" / "straight-3"))
    assert all(row["actor/grad_norm"] > 0 and row["critic/frac_zero_std_groups"] < 1 for row in rows.values())

    # the export check exports that same run's last checkpoint (full fine-tuning), without training again
    straight = ctx.__dict__["_straight_runs"][3]
    r = run_check("export", ctx)
    assert ctx.__dict__["_straight_runs"][3] is straight
    assert r.status == PASS, r
    text = "\n".join([r.summary, *r.details])
    assert "the export (copied) reloads in plain transformers with the trained policy's logits" in text
    assert "logits equal the trained policy's: max |difference| 0 on a 64-token probe" in text
    assert "tensors differ from the base model (every one training changed)" in text


def test_a_resume_point_one_step_late_trains_zero_steps_and_fails(tmp_path, arith_data, monkeypatch):
    # seeded: the checkpoint's trainer state read back one step later, so the resumed run thinks it is done.
    # Its metrics.jsonl still looks whole (the killed run had logged step 3): only the steps trained and the
    # missing global_step_3 give it away
    read = checkpoint.read_point

    def one_step_late(folder: str) -> checkpoint.ResumePoint:
        point = read(folder)
        return checkpoint.ResumePoint(point.path, point.step + 1, point.epoch, point.sample)

    monkeypatch.setattr(checkpoint, "read_point", one_step_late)
    r = run_check("resume", context(tmp_path, arith_data))
    assert r.status == FAIL, r
    assert ("the resumed run trained 0 step(s) and exited where 1 remained (to step 3; global_step_3 missing)"
            in r.summary)
    assert "it took up at step 4, not step 3: its resume point says step 3, the last checkpoint is step 2" in r.summary
    assert "no whole global_step_3 in the resumed run's folder" in r.summary
    assert "trainer.resume_mode=disable" in r.fix


def test_a_restore_that_skips_a_batch_fails_naming_the_step_and_metric(tmp_path, arith_data, monkeypatch):
    # seeded: the restore puts everything back, then the sampler one batch further: step 3 trains step 4's prompts
    restore = checkpoint._restore

    def skipping(run, folder):
        restore(run, folder)
        run.sampler.next_batch()

    monkeypatch.setattr(checkpoint, "_restore", skipping)
    r = run_check("resume", context(tmp_path, arith_data))
    assert r.status == FAIL, r
    assert "step 3 differs after the resume: " in r.summary and " uninterrupted, " in r.summary
    assert "metrics of step 3 differ" in "\n".join(r.details)
    assert "the final actor weights differ after the resume" in r.summary
    assert "resumed from step 2 (epoch 0, sample 2) and trained step 3" in "\n".join(r.details)  # the steps were right


def test_async_configs_share_a_synchronous_twin_run_and_say_so(tmp_path, arith_data):
    # the shared twin run (export reads its policy in-process) is synchronous; the resume check's async part
    # (test_check_resume_async.py) keeps the pool and the async keys
    from hybridrl.check.resume_async import pool_changes
    from hybridrl.check.twin_run import SYNC_ONLY, notes, run_changes

    ctx = context(tmp_path, arith_data, "trainer.backend=ray", "rollout.n_gpus_per_node=1", "rollout.nnodes=1",
                  "async_training.staleness_threshold=1", "async_training.use_rollout_log_probs=true")
    assert ctx.runnable, ctx.config_errors
    cfg = ctx.run_config(str(tmp_path / "run"), **run_changes(ctx)).config  # accepted: no pool, async keys inert
    assert cfg.rollout.n_gpus_per_node == 0 and cfg.trainer.backend == "local"
    assert notes(ctx)[1] == SYNC_ONLY and "re-runs the in-flight buffer policy" in SYNC_ONLY
    cfg = ctx.run_config(str(tmp_path / "async"), 4, **pool_changes(ctx, str(tmp_path / "gen"))).config
    assert (cfg.trainer.backend, cfg.trainer.n_gpus_per_node, cfg.rollout.n_gpus_per_node) == ("ray", 1, 1)
    assert cfg.async_training.staleness_threshold == 1 and cfg.custom_reward_function.name == "compute_score"
