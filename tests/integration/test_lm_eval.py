"""lm-evaluation-harness against `hybridrl serve`: its `local-completions` model (OpenAI completions over HTTP)
scores the bundled tiny-arith exactly as its `hf` model (the same checkpoint in-process) does, on a generation task
(GSM8K-style, greedy, a few rows of the local GSM8K test file) and on a multiple-choice log-likelihood task
(arithmetic, 4 choices). Offline: the task YAMLs (lm_eval_tasks/) read local JSON-lines files that the test writes.
lm_eval is installed by `make vllm` (requirements/all.lock, the eval-harness extra); without it the test skips."""

from __future__ import annotations

import json
import math
import random
from importlib.util import find_spec
from pathlib import Path

import pytest

from hybridrl.data.arithmetic import make_problems
from hybridrl.models.loading import BUNDLED

from conftest import find_shared_data  # tests/conftest.py
from test_serve import KEY, MODEL, server  # tests/integration/test_serve.py: `hybridrl serve tiny-arith` in a subprocess

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(find_spec("lm_eval") is None,
                                 reason="lm-evaluation-harness is not installed (`make vllm` installs requirements/"
                                        "all.lock, which has it: the eval-harness extra)")]

TASKS = Path(__file__).parent / "lm_eval_tasks"
TINY = str(BUNDLED["tiny-arith"])
CONTEXT = 256  # tiny-arith's max_position_embeddings and `hybridrl serve`'s default --max-model-len
GEN_TOKENS = 32  # the GSM8K task's max_gen_toks
GSM8K_ROWS, MC_ROWS = 6, 16
GSM8K, MC = "hybridrl_gsm8k_sample", "hybridrl_arith_mc"  # the task names in lm_eval_tasks/


def write_gsm8k_sample(folder: Path, tokenizer) -> None:
    """The first GSM8K test rows whose prompt leaves room for the answer in the context (so neither side
    truncates), as gsm8k_sample.jsonl."""
    rows = []
    with open(find_shared_data("gsm8k") / "test.jsonl") as f:
        for line in f:
            row = json.loads(line)
            prompt = f"Question: {row['question']}\nAnswer:"
            if len(tokenizer(prompt)["input_ids"]) + GEN_TOKENS < CONTEXT - 1:
                rows.append(row)
            if len(rows) == GSM8K_ROWS:
                break
    (folder / "gsm8k_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_arith_mc(folder: Path) -> None:
    """Two-operand additions (tiny-arith's training task), each with the right sum and three near misses in a
    random order, as arith_mc.jsonl."""
    rng = random.Random(0)
    rows = []
    for expr, answer in make_problems(MC_ROWS, seed=123, min_operands=2, max_operands=2, max_value=99, ops="+"):
        wrong = rng.sample([d for d in (-10, -2, -1, 1, 2, 10) if answer + d >= 0], 3)
        choices = [str(answer)] + [str(answer + d) for d in wrong]
        rng.shuffle(choices)
        rows.append({"expression": expr, "choices": choices, "answer": choices.index(str(answer))})
    (folder / "arith_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """evaluate(model, model_args) -> lm_eval.simple_evaluate's output on both tasks, with its samples; run in a
    folder holding the tasks' data files (the YAMLs name them relative to it), offline, with a datasets cache
    of its own."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("lm_eval")
    write_gsm8k_sample(folder, AutoTokenizer.from_pretrained(TINY))
    write_arith_mc(folder)
    with pytest.MonkeyPatch.context() as mp:
        # before lm_eval imports datasets, which reads these once
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(folder / "datasets-cache"))
        mp.setenv("OPENAI_API_KEY", KEY)  # local-completions sends it as the bearer token
        mp.chdir(folder)
        import lm_eval
        from lm_eval.tasks import TaskManager

        tasks = TaskManager(include_path=str(TASKS), include_defaults=False)

        def evaluate(model: str, model_args: str) -> dict:
            return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[GSM8K, MC], task_manager=tasks,
                                           log_samples=True)

        yield evaluate


@pytest.fixture(scope="module")
def both(harness) -> tuple[dict, dict]:
    """(hf's output, local-completions' output against `hybridrl serve tiny-arith`)."""
    hf = harness("hf", f"pretrained={TINY},dtype=float32,device=cpu,batch_size=4")
    with server("--engine", "hf") as url:
        api = harness("local-completions", f"base_url={url}/v1/completions,model={MODEL},tokenizer={TINY},"
                                           f"tokenizer_backend=huggingface,max_length={CONTEXT},num_concurrent=1,"
                                           "max_retries=1")
    return hf, api


def per_doc(out: dict, task: str) -> dict[tuple[str, int], list]:
    """(filter, doc id) -> the model's raw responses for that document."""
    return {(s["filter"], s["doc_id"]): s["resps"] for s in out["samples"][task]}


def test_generation_task_scores_and_responses_equal_hf(both):
    hf, api = both
    assert hf["results"][GSM8K] == api["results"][GSM8K]
    assert hf["results"][GSM8K]["sample_len"] == GSM8K_ROWS
    # the greedy responses themselves, word for word (the tiny model scores 0 on GSM8K, so the scores alone
    # would also agree if the server answered something else)
    assert per_doc(hf, GSM8K) == per_doc(api, GSM8K)


def test_multiple_choice_task_scores_and_log_likelihoods_equal_hf(both):
    hf, api = both
    assert hf["results"][MC] == api["results"][MC]
    assert hf["results"][MC]["acc,none"] > 0.25  # above chance: the model's own log-likelihoods decide
    hf_docs, api_docs = per_doc(hf, MC), per_doc(api, MC)
    assert hf_docs.keys() == api_docs.keys() and len(hf_docs) == MC_ROWS
    for key, choices in hf_docs.items():
        for [(hf_ll, hf_greedy)], [(api_ll, api_greedy)] in zip(choices, api_docs[key], strict=True):
            assert math.isclose(hf_ll, api_ll, abs_tol=1e-4), (key, hf_ll, api_ll)
            assert hf_greedy == api_greedy, key
