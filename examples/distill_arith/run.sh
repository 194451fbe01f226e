#!/usr/bin/env bash
# On-policy distillation end to end on the arithmetic task (README.md):
#   1. the teacher: GRPO from tiny-arith for TEACHER_STEPS steps, exported as a plain HuggingFace folder;
#   2. the student: tiny-arith distilled from that teacher for STEPS steps (distill.yaml, pure distillation);
#   3. the comparison: the student against GRPO after the same number of steps (the teacher's own run) and the
#      teacher itself (`hybridrl compare`).
# Extra arguments are overrides of the distillation run (e.g. distillation.distillation_loss.loss_mode=k3, or
# distillation.distillation_loss.use_task_rewards=true for GRPO + distillation).
# To run it again: rm -rf build/distill_arith (the teacher is reused while build/distill_arith/teacher exists).
set -euo pipefail
cd "$(dirname "$0")/../.."
TEACHER_STEPS=${TEACHER_STEPS:-100}
STEPS=${STEPS:-30}
OUT=build/distill_arith
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # a tiny model: one thread per process is faster than two fighting
[ -f data/arithmetic/train.parquet ] || .venv/bin/hybridrl data arithmetic --output data/arithmetic
if [ ! -d "$OUT/teacher" ]; then
  .venv/bin/hybridrl train trainer.total_training_steps="$TEACHER_STEPS" trainer.test_freq=5 \
    trainer.experiment_name=distill_arith_teacher trainer.default_local_dir="$OUT/teacher_run"
  .venv/bin/hybridrl export "$OUT/teacher_run" "$OUT/teacher"
fi
.venv/bin/hybridrl train --config examples/distill_arith/distill.yaml trainer.total_training_steps="$STEPS" "$@"
.venv/bin/hybridrl compare "$OUT/teacher_run" "$OUT/distill" \
  --keys val-core/arithmetic/reward/mean@1,distill/teacher_kl_mean,actor/entropy,steps
