#!/usr/bin/env bash
# Tool use end to end: the data, an SFT warm start that teaches the tiny model the tool-call format
# (three stages, see sft.yaml), then GRPO with multi-turn rollouts and the calculator, then the
# tool-use statistics of every validation. Extra arguments are RL config overrides.
# About 40 minutes on 2 loaded CPU cores (README.md). To run it again: rm -rf build/tool_calc
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # a tiny model: one thread per process is faster than two fighting
.venv/bin/python examples/tool_calc/make_data.py
.venv/bin/hybridrl sft --config examples/tool_calc/sft.yaml                      # -> build/tool_calc/sft_stage1
.venv/bin/hybridrl sft --config examples/tool_calc/sft.yaml model.partial_pretrain=build/tool_calc/sft_stage1 \
  trainer.total_training_steps=160 optim.lr=1e-3 optim.lr_warmup_steps=5 data.seed=2 \
  trainer.default_local_dir=build/tool_calc/sft_stage2
.venv/bin/hybridrl sft --config examples/tool_calc/sft.yaml model.partial_pretrain=build/tool_calc/sft_stage2 \
  trainer.total_training_steps=160 optim.lr=1e-3 optim.lr_warmup_steps=5 data.seed=3 \
  trainer.default_local_dir=build/tool_calc/sft
.venv/bin/hybridrl train --config examples/tool_calc/rl.yaml "$@"
# call rate, operand/result copying and accuracy at every validation (step 0 = the warm start)
for f in $(ls build/tool_calc/rl/val_generations/*.jsonl | sort -V); do
  echo "step $(basename "$f" .jsonl): $(.venv/bin/python examples/tool_calc/tool_stats.py --dump "$f")"
done
.venv/bin/hybridrl plot build/tool_calc/rl -o build/tool_calc/rl/curves.png
