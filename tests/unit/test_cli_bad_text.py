"""Every data command given a row with a lone surrogate ("\\ud83d": half of an emoji, legal JSON) stops with one
line naming the file, row and field, exit code 2; it used to exit 1 with the tokenizer's TypeError traceback.
The rows are read before any model weights load, so each command costs a tokenizer load."""

from __future__ import annotations

import json

import pytest

from hybridrl.cli import main

PROMPT = [{"role": "user", "content": "What is 1+2? \ud83d"}]  # the surrogate at character 13
RL_ROW = {"data_source": "arithmetic", "prompt": PROMPT, "reward_model": {"ground_truth": "3"}}
SFT_ROW = {"prompt": PROMPT, "response": "3"}
RM_ROW = {"prompt": PROMPT, "chosen": "3", "rejected": "4"}


def write_jsonl(path, row: dict) -> str:
    path.write_text(json.dumps({"data_source": "arithmetic", "prompt": [{"role": "user", "content": "fine"}],
                                "reward_model": {"ground_truth": "1"}, "response": "1", "chosen": "1",
                                "rejected": "2"}) + "\n" + json.dumps(row) + "\n")  # json.dumps writes "\ud83d"
    return str(path)


@pytest.mark.parametrize("command, row, args, fix", [
    ("train", RL_ROW, ["data.train_files={data}", "trainer.default_local_dir={out}"],
     ". Fix the row, or set data.skip_bad_rows=true to skip bad rows (their count is reported)"),
    ("eval", RL_ROW, ["--data", "{data}", "--num-workers", "0", "--n", "1"],
     ". Fix the row, or leave it out of --data"),
    ("sft", SFT_ROW, ["data.train_files={data}", "data.response_key=response", "model.partial_pretrain=tiny-arith",
                      "trainer.default_local_dir={out}"], ""),
    ("rm", RM_ROW, ["data.train_files={data}", "model.partial_pretrain=tiny-arith", "trainer.default_local_dir={out}"],
     ""),
])
def test_a_lone_surrogate_row_is_one_line_naming_file_row_and_field(tmp_path, capsys, command, row, args, fix):
    data = write_jsonl(tmp_path / "rows.jsonl", row)
    assert main([command] + [a.format(data=data, out=tmp_path / "run") for a in args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.endswith(f"hybridrl {command}: error: {data} row 1: field 'prompt[0].content' holds a lone surrogate "
                        "\\ud83d at character 13 (half of a UTF-16 pair, left when text is cut inside an emoji or "
                        "another character beyond U+FFFF); it has no UTF-8 form, so no tokenizer can read it; restore "
                        f"the whole character or delete it{fix}\n"), err
