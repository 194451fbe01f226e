#!/usr/bin/env bash
# verl's GSM8K GRPO command (issue #21; verl's examples/grpo_trainer/run_qwen3-8b.sh) run by hybridrl as
# written, but for the keys README.md lists: a local SmolLM2-135M-Instruct folder, local GSM8K parquet,
# batch sizes scaled to a 2-core CPU, one worker, no rollout tensor parallelism, console + file loggers.
# Extra arguments are more overrides, e.g. trainer.total_training_steps=2 (the last value of a key wins).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-models/smollm2-135m-instruct}  # `make smollm2` writes it
DATA=${DATA:-data/gsm8k}
[ -d "$MODEL" ] || make smollm2
# The raw GSM8K files: $GSM8K_SOURCE, else $HYBRIDRL_DATA_DIR/gsm8k (`hybridrl data gsm8k` says so when neither is set)
[ -f "$DATA/train.parquet" ] || "$PY" -m hybridrl data gsm8k ${GSM8K_SOURCE:+--input "$GSM8K_SOURCE"} --output "$DATA"

exec "$PY" -m hybridrl train \
    algorithm.adv_estimator=grpo \
    data.train_files=$DATA/train.parquet \
    data.val_files=$DATA/test.parquet \
    data.train_batch_size=16 \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path=$MODEL \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' \
    trainer.project_name='verl_grpo_qwen3' \
    trainer.experiment_name='smollm2_135m_gsm8k_grpo' \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.total_epochs=15 \
    "$@"
