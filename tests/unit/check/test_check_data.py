"""The `data` check proves its invariants on a correct setup, and reports ✗ naming the cause for each defect it
exists for: train/val leakage, prompts over data.max_prompt_length with truncation=error (or many cut), an
unknown data_source, malformed rows, a chat template that drops a message, a response budget shorter than the
reference solutions."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import CHECKS
from hybridrl.check.result import FAIL, PASS
from hybridrl.check.runner import _run_one
from hybridrl.data.dataset import read_rows


def run_data(tmp_path, train: str, val: str, *overrides: str, model: str = "tiny-arith"):
    """The data check as `hybridrl check` runs it (an exception is a ✗, not a crash)."""
    import hybridrl.check.data  # noqa: F401  (registers the check)

    ctx = CheckContext(None, [f"actor_rollout_ref.model.path={model}", f"data.train_files=[{train}]",
                              f"data.val_files=[{val}]", *overrides], str(tmp_path / "work"))
    return _run_one(CHECKS.entry("data"), ctx)


def write(path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def test_passes_on_the_arithmetic_data(tmp_path, arith_data):
    r = run_data(tmp_path, arith_data["train"], arith_data["val"])
    assert r.status == PASS, r
    text = "\n".join(r.details)
    assert "300 rows parse" in text and "40 rows parse" in text
    assert "every prompt fits data.max_prompt_length=64" in text
    assert "no prompt of data.val_files (40) is in data.train_files (300)" in text
    assert "every data_source has a scorer: arithmetic" in text


def test_leakage_fails_with_count_and_example(tmp_path, arith_data):
    train = read_rows(arith_data["train"], "x")
    val = write(tmp_path / "val.parquet", read_rows(arith_data["val"], "x")[:10] + train[5:8])
    r = run_data(tmp_path, arith_data["train"], val)
    assert r.status == FAIL
    assert "3 of 13 (23.1%) validation prompts are also training prompts (leakage)" in r.summary
    assert any("data.val_files row 10 = data.train_files row 5" in d for d in r.details)
    assert "remove the 3 shared prompts from data.val_files" in r.fix


def test_truncation_error_with_overlong_prompts_fails_naming_the_length(tmp_path, arith_data):
    r = run_data(tmp_path, arith_data["train"], arith_data["val"], "data.max_prompt_length=10")
    assert r.status == FAIL
    assert "prompts are over data.max_prompt_length=10: data.truncation=error stops the run" in r.summary
    longest = int(next(d for d in r.details if d.startswith("longest prompt")).split()[2])
    assert f"data.max_prompt_length={longest} (keeps all)" in r.fix and "data.filter_overlong_prompts=true" in r.fix


def test_many_prompts_cut_fails_and_few_dropped_passes(tmp_path, arith_data):
    rows = read_rows(arith_data["train"], "x")
    long_one = dict(rows[0], prompt=[{"role": "user", "content": "What is " + "1+" * 60 + "1?"}])
    train = write(tmp_path / "train.parquet", rows[1:] + [long_one])  # 1 of 300 over: 0.3%, under FEW
    cut = run_data(tmp_path, arith_data["train"], arith_data["val"], "data.max_prompt_length=10",
                   "data.truncation=left")
    assert cut.status == FAIL and "are cut (data.truncation=left)" in cut.summary
    assert "data.max_prompt_length=" in cut.fix
    few = run_data(tmp_path, train, arith_data["val"], "data.filter_overlong_prompts=true")
    assert few.status == PASS, few
    assert any("1 of 300 (0.3%) prompts over data.max_prompt_length=64 are dropped" in d for d in few.details)


def test_unknown_data_source_fails_naming_it_and_the_fix(tmp_path, arith_data):
    rows = read_rows(arith_data["train"], "x")
    train = write(tmp_path / "train.parquet", [dict(r, data_source="my_task") for r in rows[:20]] + rows[20:])
    r = run_data(tmp_path, train, arith_data["val"])
    assert r.status == FAIL
    assert "'my_task' (20 rows of data.train_files): no built-in scorer has that name" in r.summary
    assert "custom_reward_function.path" in r.fix and "arithmetic" in r.fix


def test_malformed_rows_fail_unless_skipped(tmp_path, arith_data):
    rows = read_rows(arith_data["train"], "x")
    train = str(tmp_path / "train.jsonl")  # jsonl: a string prompt next to lists, which parquet would refuse
    with open(train, "w") as f:
        for r in rows[:50]:
            f.write(json.dumps(r) + "\n")
        f.write(json.dumps(dict(rows[50], prompt="What is 1+1?")) + "\n")
    r = run_data(tmp_path, train, arith_data["val"])
    assert r.status == FAIL and "data.train_files: 1 malformed rows; the run stops at the first" in r.summary
    assert "data.skip_bad_rows=true" in r.fix
    assert any("row 50: 'prompt' is a str" in d for d in r.details)


def model_with_template(tmp_path, template: str) -> str:
    """A copy of tiny-arith whose chat template is `template`."""
    from hybridrl.models.loading import resolve_model_path

    model = shutil.copytree(resolve_model_path("tiny-arith"), tmp_path / "model")
    for f in ("chat_template.jinja", "chat_template.json"):  # a template file would win over tokenizer_config's
        if os.path.exists(os.path.join(model, f)):
            os.remove(os.path.join(model, f))
    cfg_file = os.path.join(model, "tokenizer_config.json")
    with open(cfg_file) as f:
        cfg = json.load(f)
    cfg["chat_template"] = template
    with open(cfg_file, "w") as f:
        json.dump(cfg, f)
    return str(model)


LAST_MESSAGE_ONLY = ("{{ '<|im_start|>' + messages[-1]['role'] + '\\n' + messages[-1]['content'] + '<|im_end|>\\n' }}"
                     "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
NO_SYSTEM_ROLE = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
                  "supported') }}{% endif %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def with_system_prompt(tmp_path, arith_data, every: int) -> str:
    rows = [dict(r, prompt=[{"role": "system", "content": "Answer with the number only."}] + list(r["prompt"]))
            if i % every == 0 else r for i, r in enumerate(read_rows(arith_data["train"], "x"))]
    return write(tmp_path / "train.parquet", rows)


def test_a_chat_template_that_drops_a_message_fails(tmp_path, arith_data):
    model = model_with_template(tmp_path, LAST_MESSAGE_ONLY)  # a system prompt never reaches the model
    r = run_data(tmp_path, with_system_prompt(tmp_path, arith_data, 1), arith_data["val"], model=model)
    assert r.status == FAIL
    assert "data.train_files row 0: the chat template drops the text of message 0 (system)" in r.summary
    assert "chat_template" in r.fix


def test_a_chat_template_that_fails_on_some_prompts_fails_naming_them(tmp_path, arith_data):
    model = model_with_template(tmp_path, NO_SYSTEM_ROLE)
    r = run_data(tmp_path, with_system_prompt(tmp_path, arith_data, 10), arith_data["val"], model=model)
    assert r.status == FAIL
    assert "data.train_files: the chat template fails on 30 of 300 (10.0%) prompts" in r.summary
    assert any(d.startswith("first: row 0: TemplateError: System role not supported") for d in r.details)


def test_a_response_budget_under_the_reference_solutions_fails(tmp_path, arith_data):
    rows = read_rows(arith_data["train"], "x")
    worked = [dict(r, extra_info=dict(r["extra_info"], answer=f"First add the tens, then the ones: the sum is "
                                                                f"{r['reward_model']['ground_truth']}."))
              for r in rows]
    r = run_data(tmp_path, write(tmp_path / "train.parquet", worked), arith_data["val"], "data.max_response_length=8")
    assert r.status == FAIL
    assert "300 of 300 (100.0%) reference solutions are longer than data.max_response_length=8" in r.summary
    assert r.fix.startswith("set data.max_response_length=")
    ok = run_data(tmp_path, arith_data["train"], arith_data["val"], "data.max_response_length=8")
    assert any("data.max_response_length=8 fits 300 of 300" in d for d in ok.details)


def test_an_unreadable_file_fails_naming_the_key(tmp_path, arith_data):
    r = run_data(tmp_path, arith_data["train"], str(tmp_path / "missing.parquet"))
    assert r.status == FAIL and "data.val_files cannot be read" in r.summary
