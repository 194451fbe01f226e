#!/usr/bin/env bash
# The default task's config against the tuning guide's cold-start advice and against the best config of
# examples/sweep/guide_grpo.yaml, each run again with 3 seeds (data.seed = trainer.seed = 1, 2, 3: the prompt shuffle and the sampling), 200 steps
# (the default task whole), two runs at a time (docs/guide_claims.md).
# Run from the repository root after the sweep: bash examples/sweep/guide_seeds.sh LR CLIP KL
# (the sweep's best values, as `hybridrl compare checkpoints/sweeps/guide_grpo` lists them first).
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: bash examples/sweep/guide_seeds.sh LR CLIP KL_LOSS_COEF (the best trial of the guide_grpo sweep)" >&2
    exit 2
fi
lr=$1 clip=$2 kl=$3
HYBRIDRL=${HYBRIDRL:-.venv/bin/hybridrl}
out=checkpoints/guide_seeds
arms=(
    "default|"
    "guide|actor_rollout_ref.actor.clip_ratio=0.15 actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_coef=0.05"
    "swept|actor_rollout_ref.actor.optim.lr=$lr actor_rollout_ref.actor.clip_ratio=$clip actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_coef=$kl"
)
jobs=()
for arm in "${arms[@]}"; do
    name=${arm%%|*} args=${arm#*|}
    for seed in 1 2 3; do
        jobs+=("$HYBRIDRL train trainer.default_local_dir=$out/${name}_s$seed data.seed=$seed trainer.seed=$seed trainer.save_freq=-1 $args")
    done
done
# two at a time, one torch thread each: the same cores a sweep's two trials get on this machine
printf '%s\n' "${jobs[@]}" | OMP_NUM_THREADS=1 xargs -P 2 -I{} bash -c '{} > /dev/null'
for arm in "${arms[@]}"; do
    name=${arm%%|*}
    $HYBRIDRL compare --keys val-core/arithmetic/reward/mean@1,steps $out/${name}_s1 $out/${name}_s2 $out/${name}_s3
done
