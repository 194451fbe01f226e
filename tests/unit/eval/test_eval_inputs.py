"""`hybridrl eval`'s inputs: prompt and response lengths derived from the data and the model when not given
(64/8-token defaults used to refuse real data), errors that name eval's own flags, and outputs and reward
files checked before the model loads."""

from __future__ import annotations

import json
import re

import pytest

import hybridrl.eval.evaluate as ev
from hybridrl.cli import main
from hybridrl.data.dataset import encode_prompts
from hybridrl.errors import ConfigError, DataError
from hybridrl.eval.evaluate import RESPONSE_CAP, EvalSettings, _data_and_lengths
from hybridrl.models.loading import load_causal_lm, load_tokenizer

CONTEXT = 256  # the bundled tiny-arith model's max_position_embeddings


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer("tiny-arith"), load_causal_lm("tiny-arith")


def write_prompts(path, questions: list[str]) -> str:
    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": q}],
             "reward_model": {"ground_truth": "1"}} for q in questions]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def lengths(path: str, tiny, **kw) -> tuple[int, int]:
    tok, model = tiny
    _, s, _ = _data_and_lengths(EvalSettings(data=[path], model="tiny-arith", **kw), tok, model)
    return s.max_prompt_length, s.max_response_length


def test_lengths_come_from_the_data_and_the_model(tmp_path, tiny):
    """A prompt longer than the former 64-token default is evaluated: the longest prompt sets the limit."""
    tok, _ = tiny
    questions = ["What is 1+2?", "What is " + "+".join(["12"] * 40) + "?"]
    path = write_prompts(tmp_path / "long.jsonl", questions)
    longest = max(len(ids) for ids in encode_prompts(tok, [[{"role": "user", "content": q}] for q in questions]))
    assert longest > 64  # what the old default refused
    assert lengths(path, tiny) == (longest, min(RESPONSE_CAP, CONTEXT - longest))
    assert lengths(path, tiny, max_response_length=5) == (longest, 5)
    assert lengths(path, tiny, max_prompt_length=200) == (200, CONTEXT - 200)


def test_a_prompt_over_the_flag_names_the_flag_not_the_trainer_key(tmp_path, tiny):
    path = write_prompts(tmp_path / "p.jsonl", ["What is " + "+".join(["12"] * 40) + "?"])
    with pytest.raises(DataError, match=r"row 0: prompt is \d+ tokens, over --max-prompt-length=16; raise "
                                        r"--max-prompt-length, or leave it out \(the longest prompt sets it\)$"):
        lengths(path, tiny, max_prompt_length=16)


def test_lengths_over_the_context_name_the_flags(tmp_path, tiny):
    path = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    with pytest.raises(ConfigError, match=re.escape("--max-prompt-length + --max-response-length = 200 + 100 exceeds "
                                                    "the model's max_position_embeddings=256")):
        lengths(path, tiny, max_prompt_length=200, max_response_length=100)


def test_a_prompt_that_fills_the_context_leaves_no_room(tmp_path, tiny):
    path = write_prompts(tmp_path / "p.jsonl", ["What is " + "+".join(["12"] * 200) + "?"])
    with pytest.raises(DataError, match=r"prompt is \d+ tokens, over the model's context \(max_position_embeddings\)="
                                        r"256; this prompt cannot be evaluated with tiny-arith; leave the row out"):
        lengths(path, tiny)
    short = write_prompts(tmp_path / "short.jsonl", ["What is 1+2?"])
    with pytest.raises(ConfigError, match=r"^--max-prompt-length 256 fills the model's context of 256 tokens, which "
                                          r"leaves no room for a response; give a smaller --max-prompt-length"):
        lengths(short, tiny, max_prompt_length=256)


@pytest.fixture
def never_load(monkeypatch):
    """Fail the test if eval gets as far as loading a model."""
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the inputs were checked")
    monkeypatch.setattr(ev, "load_causal_lm", refuse)


@pytest.mark.parametrize("flag", ["--output", "--dump"])
def test_an_unwritable_output_fails_before_the_evaluation(tmp_path, capsys, never_load, flag):
    data = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["eval", "--data", data, flag, str(blocker / "out.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"hybridrl eval: error: {flag} {blocker}/out.json: {blocker} is a file, not a folder; give a path you " \
                  "can write to"


def test_a_reward_file_that_exits_fails_before_the_model_loads_naming_the_flag(tmp_path, capsys, never_load):
    data = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\nsys.exit(5)\n")
    assert main(["eval", "--data", data, "--custom-reward-path", str(quits), "--num-workers", "0"]) == 2
    assert capsys.readouterr().err.strip() == (f"hybridrl eval: error: --custom-reward-path {quits} failed to import: "
                                               "it called sys.exit(5)")


def test_a_missing_prompt_column_names_the_flag(tmp_path, capsys):
    data = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    assert main(["eval", "--data", data, "--prompt-key", "question", "--num-workers", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("no column 'question' (columns: data_source, prompt, "
                                                    "reward_model); set --prompt-key to the column holding the chat "
                                                    "messages")


@pytest.mark.parametrize("seed", ["-1", str(2 ** 64)])
def test_a_seed_out_of_range_is_one_line(tmp_path, capsys, never_load, seed):
    data = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    assert main(["eval", "--data", data, "--seed", seed]) == 2  # 2**64 was an overflow traceback after loading
    assert capsys.readouterr().err.strip() == f"hybridrl eval: error: --seed {seed}: give 0 to 4294967295"


def test_every_bad_flag_is_reported_at_once(tmp_path, capsys, never_load):
    data = write_prompts(tmp_path / "p.jsonl", ["What is 1+2?"])
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["eval", "--data", data, "--n", "0", "--top-k", "0", "--output", str(blocker / "x.json")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "hybridrl eval: error: 3 problems in the config:",
        "  1. --n 0: give at least 1 sample per prompt",
        "  2. --top-k 0: give a positive count, or -1 for off",
        f"  3. --output {blocker}/x.json: {blocker} is a file, not a folder; give a path you can write to"]
