#!/usr/bin/env bash
# Reward model for arithmetic, end to end: prompts, preference pairs sampled from the bundled tiny model
# and labelled by the arithmetic scorer, then `hybridrl rm`. Extra arguments are rm config overrides.
# The reward model lands in build/rm_arith: pass it to an RL run as reward_model.model.path=build/rm_arith.
# About 5 minutes on 2 shared CPU cores (README.md). To run it again: rm -rf data/rm_arith build/rm_arith
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # a tiny model: one thread per process is faster than two fighting
.venv/bin/hybridrl data arithmetic --output data/rm_arith/prompts --train-size 4000 --val-size 500 --seed 11
.venv/bin/python examples/rm_arith/make_pairs.py --prompts data/rm_arith/prompts --out data/rm_arith
.venv/bin/hybridrl rm --config examples/rm_arith/rm.yaml "$@"   # prints val pair accuracy at the end
