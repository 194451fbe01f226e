#!/usr/bin/env bash
# TRL in its own virtual environment (bench/.venv-trl), so its transformers/accelerate pins never
# touch the project's venv. torch stays the CPU wheel: constraints.txt pins torch==2.13.0 (an
# unpinned torch would pull GBs of CUDA packages). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=bench/.venv-trl
PY=$VENV/bin/python
STAMP=$VENV/.installed-stamp
if [ -f "$STAMP" ] && [ "$STAMP" -nt bench/requirements-trl.txt ]; then
    exit 0
fi
python3 -m venv "$VENV"
"$PY" -m pip install -q -c constraints.txt torch==2.13.0
"$PY" -m pip install -q -c constraints.txt -r bench/requirements-trl.txt
"$PY" -c "import torch, trl, transformers; print(f'trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}')"
touch "$STAMP"
