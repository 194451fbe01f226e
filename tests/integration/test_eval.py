"""`hybridrl eval` on the bundled tiny model: the trainer's metrics and their identities, KL to a
reference, checkpoint folders as models, the JSON/JSONL files and the CLI's exit codes."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch

from hybridrl.cli import main
from hybridrl.eval.diversity import distinct_n
from hybridrl.eval.evaluate import EvalSettings, evaluate, format_table, model_folder
from hybridrl.models.loading import BUNDLED
from hybridrl.trainer.checkpoint import LATEST, _write_manifest

TINY = str(BUNDLED["tiny-arith"])
CORE = "val-core/arithmetic/reward"


def strict_json(text: str) -> dict:
    """json.loads that refuses NaN/Infinity (not JSON; other tools choke on them)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


@pytest.fixture(scope="module")
def val_file(arith_data) -> str:
    return arith_data["val"]


@pytest.fixture(scope="module")
def perturbed_model(tmp_path_factory) -> str:
    """The tiny model with Gaussian noise (std 0.05) on every weight: a different policy, same tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("perturbed")
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(TINY).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def self_ref(val_file, tmp_path_factory):
    """8 prompts x 4 samples of the tiny model, with itself (a separately loaded copy) as the reference."""
    out = tmp_path_factory.mktemp("eval")
    settings = EvalSettings(data=[val_file], model="tiny-arith", ref=TINY, n=4, max_samples=8, num_workers=0,
                            output=str(out / "eval.json"), dump=str(out / "gens.jsonl"))
    return evaluate(settings, log=lambda *_: None)


@pytest.mark.slow
def test_metrics_are_finite_and_obey_the_pass_at_k_identities(self_ref):
    m = self_ref.metrics
    assert self_ref.num_prompts == 8 and len(self_ref.rows) == 32
    expected = {f"{CORE}/mean@4", f"{CORE}/std@4", f"{CORE}/pass@1", f"{CORE}/pass@2", f"{CORE}/pass@4",
                "val-aux/response_length/mean", "val-aux/reward/errors", "diversity/distinct_1",
                "diversity/distinct_2", "diversity/self_bleu", "diversity/rep3", "kl/mean_token_k1", "kl/mean_seq_k1",
                "kl/mean_token_k3", "kl/mean_seq_k3"}
    assert expected <= set(m)
    # one-word arithmetic answers have no bigram/trigram: those are undefined (nan), the rest finite
    assert all(math.isfinite(v) for k, v in m.items() if k not in ("diversity/distinct_2", "diversity/rep3"))
    scores = [row["score"] for row in self_ref.rows]
    assert set(scores) <= {0.0, 1.0}
    assert m[f"{CORE}/mean@4"] == pytest.approx(sum(scores) / len(scores), abs=1e-12)
    assert m[f"{CORE}/pass@1"] == pytest.approx(m[f"{CORE}/mean@4"], abs=1e-12)  # pass@1 is the mean accuracy
    assert m[f"{CORE}/pass@1"] <= m[f"{CORE}/pass@2"] <= m[f"{CORE}/pass@4"]
    assert 0 < m[f"{CORE}/pass@4"]  # the tiny model solves some problems, so the identities are not 0 == 0
    # diversity is per prompt group (4 consecutive rows), averaged over the prompts
    groups = [[r["output"] for r in self_ref.rows[i:i + 4]] for i in range(0, 32, 4)]
    assert m["diversity/distinct_1"] == pytest.approx(sum(distinct_n(g, 1) for g in groups) / 8)
    assert 0 <= m["diversity/self_bleu"] <= 1


@pytest.mark.slow
def test_kl_to_itself_is_zero(self_ref):
    for key in ("kl/mean_token_k1", "kl/mean_seq_k1", "kl/mean_token_k3", "kl/mean_seq_k3"):
        assert abs(self_ref.metrics[key]) <= 1e-6, key
    assert all(abs(row["kl_k1"]) <= 1e-6 for row in self_ref.rows)


@pytest.mark.slow
def test_kl_to_a_perturbed_model_is_positive(self_ref, val_file, perturbed_model):
    other = evaluate(EvalSettings(data=[val_file], ref=perturbed_model, n=4, max_samples=8, num_workers=0),
                     log=lambda *_: None)
    # same model and seed: the same samples, only the reference differs
    assert [r["output"] for r in other.rows] == [r["output"] for r in self_ref.rows]
    m = other.metrics
    assert m["kl/mean_seq_k1"] > 0.01 and m["kl/mean_token_k1"] > 0.01
    assert m["kl/mean_seq_k3"] > 0.01 and m["kl/mean_token_k3"] > 0.01
    assert m["kl/mean_seq_k1"] >= m["kl/mean_token_k1"]  # responses are >= 1 token long and the sums positive here


@pytest.mark.slow
def test_json_and_jsonl_files(self_ref):
    s = self_ref.settings
    saved = strict_json(Path(s.output).read_text())
    assert {"model", "ref", "data", "n", "temperature", "num_prompts", "metrics"} <= set(saved)
    assert (saved["n"], saved["num_prompts"], saved["temperature"], saved["data"]) == (4, 8, 1.0, list(s.data))
    for key, value in self_ref.metrics.items():
        assert saved["metrics"][key] == (value if math.isfinite(value) else None)
    rows = [json.loads(line) for line in Path(s.dump).read_text().splitlines()]
    assert len(rows) == 32 and {"input", "output", "score", "data_source", "kl_k1"} <= set(rows[0])
    table = format_table(self_ref)
    assert f"{CORE}/pass@4" in table and "n/a" in table


def _checkpoint(tmp_path) -> tuple[str, str]:
    """A run folder with one whole checkpoint (global_step_1/actor = the tiny model) as the trainer writes it."""
    step = tmp_path / "run" / "global_step_1"
    shutil.copytree(TINY, step / "actor")
    (step / "trainer_state.json").write_text(json.dumps({"step": 1, "sampler": {"epoch": 0, "position": 8}}))
    _write_manifest(str(step), 1)
    (tmp_path / "run" / LATEST).write_text("1")
    return str(tmp_path / "run"), str(step)


@pytest.mark.slow
def test_checkpoint_folders_are_models(tmp_path, val_file):
    run, step = _checkpoint(tmp_path)
    actor = os.path.join(step, "actor")
    assert model_folder(step, "--model") == actor and model_folder(run, "--model") == actor
    assert model_folder(actor, "--model") == actor and model_folder("tiny-arith", "--model") == TINY
    settings = {"data": [val_file], "n": 2, "max_samples": 3, "num_workers": 0}
    a = evaluate(EvalSettings(model=step, ref=run, **settings), log=lambda *_: None)
    b = evaluate(EvalSettings(model="tiny-arith", **settings), log=lambda *_: None)
    assert a.model_folder == actor and a.ref_folder == actor
    assert {k: v for k, v in a.metrics.items() if not k.startswith("kl/")} == pytest.approx(b.metrics, nan_ok=True)
    (tmp_path / "run" / "global_step_1" / "checkpoint.json").unlink()  # a half-written checkpoint is refused
    with pytest.raises(Exception, match="--model .*no whole checkpoint"):
        model_folder(run, "--model")


@pytest.mark.slow
def test_cli_writes_the_table_and_json(tmp_path, val_file, capsys):
    out = tmp_path / "res.json"
    # default --num-workers (2 scoring processes): the pool starts and is closed
    assert main(["eval", "--data", val_file, "--max-samples", "4", "--n", "2", "--output", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"{CORE}/mean@2" in printed.out and "diversity/self_bleu" in printed.out
    assert f"wrote {out}" in printed.err
    assert strict_json(out.read_text())["num_prompts"] == 4


@pytest.mark.parametrize("args, message", [
    (["--data", "missing.parquet"], "--data missing.parquet: file not found"),
    (["--n", "0"], "--n 0: give at least 1"),
    (["--temperature", "0"], "--temperature 0.0: sampling needs a temperature > 0"),
    (["--top-p", "0"], "--top-p 0.0"),
    (["--model", "no/such/folder"], "--model no/such/folder: no such folder"),
    (["--ref", "no/such/ref"], "--ref no/such/ref: no such folder"),
    (["--custom-reward-path", "nope.py"], "--custom-reward-path nope.py: file not found"),
])
def test_cli_errors_are_one_line_and_exit_2(args, message, val_file, capsys):
    argv = ["eval", "--data", val_file, *args] if args[0] != "--data" else ["eval", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hybridrl eval: error: ") and message in err and "\n" not in err
