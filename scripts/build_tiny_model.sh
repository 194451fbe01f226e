#!/usr/bin/env bash
# Rebuild the bundled model hybridrl/assets/tiny-arith from nothing: train a tokenizer, make a
# random-init 3.5M-parameter Qwen2, SFT it with `hybridrl sft` on the arithmetic task just far
# enough to be right part of the time (so RL has room to show gains), and copy it into the package.
# Runs in ~6-10 minutes on 2 CPU cores. Seeds are fixed; CPU float reductions can still differ across
# machines/thread counts, so a rebuild lands near, not bit-identical to, the committed weights.
set -euo pipefail
cd "$(dirname "$0")/.."
HYBRIDRL=${HYBRIDRL:-.venv/bin/hybridrl}
PYTHON=${PYTHON:-.venv/bin/python}
STEPS=${STEPS:-360}

"$HYBRIDRL" data arithmetic --output data/arithmetic --seed 0
"$PYTHON" -m hybridrl.models.tiny --out build/tiny-init --hidden 256 --layers 4 --heads 4 --intermediate 768 --seed 0
# Constant lr after a fixed warm-up: the run to step N does not depend on the total step count.
# One thread: steadier on shared cores, and float reductions in the same order on every machine.
OMP_NUM_THREADS=1 "$HYBRIDRL" sft model.partial_pretrain=build/tiny-init \
  data.train_files=data/arithmetic/train.parquet data.val_files=data/arithmetic/val.parquet \
  data.train_batch_size=64 optim.lr=1e-3 optim.lr_warmup_steps=100 optim.lr_scheduler=constant \
  trainer.total_training_steps="$STEPS" trainer.test_freq=20 trainer.default_local_dir=build/tiny-sft

dest=hybridrl/assets/tiny-arith
rm -rf "$dest" && mkdir -p "$dest"
cp build/tiny-sft/{config.json,generation_config.json,model.safetensors,tokenizer.json,tokenizer_config.json,chat_template.jinja} "$dest/"
echo "bundled model written to $dest"
