"""Shared fixtures: a tiny random Qwen2 chat model and a small arithmetic dataset, built locally; a local Ray
instance for the Ray modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# `auto` precision resolves to fp32 in the tests whatever the CPU or GPU (config/precision_auto.py), so the suite
# asserts the same tolerances on every machine kind; set before any config is made, and inherited by the runs
# the tests start. The tests of `auto` itself (tests/unit/config/test_precision_auto.py) unset it.
os.environ["HYBRIDRL_AUTO_DTYPE"] = "fp32"
# Under pytest-xdist (`make test` runs a worker per core) each worker computes on one thread, and so do the runs it
# starts (subprocesses, Ray workers of its local cluster, through OMP_NUM_THREADS): two workers of two threads each
# on two cores spend their time spinning in OpenMP barriers. A test of thread settings sets its own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

from budget_plugin import pytest_configure  # noqa: E402,F401  (the suite's time budget)
from hybridrl.data.arithmetic import write_dataset  # noqa: E402
from hybridrl.models.tiny import build_model, build_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 32-wide random model with the project's tokenizer (fast to run)."""
    out = tmp_path_factory.mktemp("random-model")
    tok = build_tokenizer()
    model = build_model(tok, hidden=32, layers=2, heads=2, intermediate=64, seed=0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory, random_model_dir) -> str:
    """A tiny sequence-classification reward model (random backbone and head) with the same tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path_factory.mktemp("reward-model")
    torch.manual_seed(1)
    model = AutoModelForSequenceClassification.from_pretrained(random_model_dir, num_labels=1)
    with torch.no_grad():  # a head large enough that different responses get clearly different scores
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(random_model_dir).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> dict[str, str]:
    return write_dataset(str(tmp_path_factory.mktemp("arith")), train_size=300, val_size=40, seed=0)


@pytest.fixture
def default_data_cwd(arith_data, tmp_path, monkeypatch):
    """A working folder where the default config's data paths (data/arithmetic/{train,val}.parquet) exist: the
    fixture data, for code that checks the files before it runs (a sweep's check) in a clone without `make data`."""
    (tmp_path / "data").mkdir()
    os.symlink(os.path.dirname(arith_data["train"]), tmp_path / "data" / "arithmetic")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` need a GPU: skipped, saying so, where torch sees none (`make gpu-check` runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is false); `make gpu-check` on one")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


REPO = Path(__file__).resolve().parent.parent


def find_shared_data(name: str) -> Path:
    """The folder ../shared/data/<name>, or $HYBRIDRL_SHARED_DATA/<name>; skipped outside CI when absent."""
    candidates = [Path(os.environ["HYBRIDRL_SHARED_DATA"])] if os.environ.get("HYBRIDRL_SHARED_DATA") else []
    candidates += [REPO.parent / "shared" / "data", Path("/work/shared/data")]
    for base in candidates:
        if (base / name).is_dir():
            return base / name
    message = f"real dataset {name!r} not found in {', '.join(map(str, candidates))}; set HYBRIDRL_SHARED_DATA"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def shared_data():
    """shared_data("gsm8k") -> the real dataset folder (see find_shared_data)."""
    return find_shared_data


@pytest.fixture(scope="session")
def perturbed_tiny_arith(tmp_path_factory):
    """make(seed) -> a folder: the bundled tiny-arith with N(0, 0.02) noise on every weight, its tokenizer unchanged
    (a teacher or student with the same vocabulary and other log-probs)."""
    from hybridrl.models.loading import load_causal_lm, load_tokenizer

    def make(seed: int) -> str:
        out = tmp_path_factory.mktemp(f"perturbed-{seed}")
        model = load_causal_lm("tiny-arith")
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=gen))
        model.save_pretrained(out)
        load_tokenizer("tiny-arith").save_pretrained(out)
        return str(out)
    return make



@pytest.fixture(scope="module")
def cluster(request):
    """One local Ray instance for the module, of the module's RAY_CPUS logical CPUs (one per worker), shut down
    after it: RayRoles leaves running a cluster it did not start. A module per size, because a process holds one
    Ray instance at a time (hence the assert: a module that left one running would hand it the wrong size).
    Here rather than in tests/integration/conftest.py, whose module name would shadow this file's for the tests
    that import from it (test_bench.py: `from conftest import REPO`)."""
    import ray  # here, not at the top: the modules that use this fixture have already skipped where it is missing

    assert not ray.is_initialized()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=request.module.RAY_CPUS, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()
