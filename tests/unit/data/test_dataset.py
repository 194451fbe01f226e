import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.data.dataset import DataNames, RLDataset
from hybridrl.errors import DataError
from hybridrl.models.loading import load_tokenizer


@pytest.fixture(scope="module")
def tok(random_model_dir):
    return load_tokenizer(random_model_dir)


def write_rows(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def row(content="What is 1+2?", truth="3"):
    return {"data_source": "arithmetic", "prompt": [{"role": "user", "content": content}],
            "reward_model": {"style": "rule", "ground_truth": truth}}


def test_prompts_get_the_chat_template_and_left_padding(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [row("What is 1+2?"), row("What is 10+20?", "30")])
    data = RLDataset([path], tok, "prompt", max_prompt_length=64)
    expected = tok("<|im_start|>user\nWhat is 1+2?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert data.records[0].prompt_ids == expected
    batch = data.collate([0, 1], pad_id=tok.pad_token_id)
    assert batch.input_ids.shape == (2, len(expected) + 2)  # "10+20" has two more digit tokens than "1+2"
    assert batch.attention_mask[0].tolist() == [0, 0] + [1] * len(expected)
    assert batch.input_ids[0, :2].tolist() == [tok.pad_token_id] * 2
    assert batch.ground_truth == ["3", "30"] and batch.index == [0, 1]


def test_missing_file_names_the_key_and_path(tmp_path, tok):
    with pytest.raises(DataError, match=r"data.train_files: file not found: .*nope.parquet"):
        RLDataset([str(tmp_path / "nope.parquet")], tok, "prompt", 64)


def test_not_a_parquet_file(tmp_path, tok):
    bad = tmp_path / "bad.parquet"
    bad.write_text("hello")
    with pytest.raises(DataError, match="is not a readable parquet file"):
        RLDataset([str(bad)], tok, "prompt", 64)


def test_missing_prompt_column_lists_columns_and_fix(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [{"data_source": "x", "question": "hi", "reward_model": {"ground_truth": "1"}}])
    with pytest.raises(DataError, match=r"no column 'prompt' \(columns: data_source, question, reward_model\); set data.prompt_key"):
        RLDataset([path], tok, "prompt", 64)


BAD_ROWS = {  # kind -> (the row, what the error must say)
    "missing prompt": ({"data_source": "arithmetic", "reward_model": {"ground_truth": "3"}},
                       r"no 'prompt' value; give every row its chat messages"),
    "missing data_source": ({"prompt": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": "3"}},
                            r"no 'data_source' value; name the reward scorer"),
    "missing ground truth": ({"data_source": "arithmetic", "prompt": [{"role": "user", "content": "hi"}],
                              "reward_model": {"style": "rule"}}, r"no reward_model.ground_truth"),
    "wrong type data_source": ({**row(), "data_source": 7}, r"'data_source' is 7, not a non-empty string"),
    "wrong type message": ({**row(), "prompt": [{"role": "user", "content": 5}]},
                           r"'prompt' message 0 is .*not \{'role': str, 'content': str\}"),
    "wrong type extra_info": ({**row(), "extra_info": "x"}, r"extra_info is a str, not a dict"),
    "empty prompt": ({**row(), "prompt": [{"role": "user", "content": "  "}]}, r"'prompt' has only empty messages"),
    "empty message list": ({**row(), "prompt": []}, r"'prompt' is an empty list"),
    "non-list messages": ({**row(), "prompt": "What is 1+2?"},
                          r"'prompt' is a str \('What is 1\+2\?'\), not a list of chat messages"),
    # json.dumps writes it as the escape "\ud83d", what a client that cut an emoji in two sends; it used to be the
    # tokenizer's raw TypeError
    "lone surrogate": ({**row(), "prompt": [{"role": "user", "content": "What is 1+2? \ud83d"}]},
                       r"field 'prompt\[0\]\.content' holds a lone surrogate \\ud83d at character 13 \(half of a "
                       r"UTF-16 pair.*; restore the whole character or delete it"),
}


def write_jsonl(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("kind", sorted(BAD_ROWS))
def test_each_bad_row_kind_names_file_row_and_fix(tmp_path, tok, kind):
    bad, says = BAD_ROWS[kind]
    path = write_jsonl(tmp_path / "a.jsonl", [row(), bad, row("What is 2+2?", "4")])
    with pytest.raises(DataError, match=r"a\.jsonl row 1: " + says + r".*set data.skip_bad_rows=true"):
        RLDataset([path], tok, "prompt", 64)
    data = RLDataset([path], tok, "prompt", 64, skip_bad_rows=True)
    assert data.num_bad == 1 and data.first_bad.startswith(f"{path} row 1: ")
    assert [r.ground_truth for r in data.records] == ["3", "4"] and [r.index for r in data.records] == [0, 2]


def test_bad_rows_in_parquet_and_max_samples_counts_good_rows(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [row(), {**row(), "prompt": []}, row("What is 2+2?", "4")])
    data = RLDataset([path], tok, "prompt", 64, skip_bad_rows=True, max_samples=2)
    assert [r.ground_truth for r in data.records] == ["3", "4"] and data.num_bad == 1


def test_only_bad_rows_is_an_error_with_the_counts(tmp_path, tok):
    path = write_jsonl(tmp_path / "a.jsonl", [{**row(), "prompt": []}])
    with pytest.raises(DataError, match=r"no prompts left \(0 over data.max_prompt_length=64, 1 bad rows skipped\)"):
        RLDataset([path], tok, "prompt", 64, skip_bad_rows=True)


def test_reward_fn_key_picks_the_scorer_column(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [{**row(), "data_source": "ignored", "task": "arithmetic"}])
    data = RLDataset([path], tok, "prompt", 64, reward_fn_key="task")
    assert data.records[0].data_source == "arithmetic"
    with pytest.raises(DataError, match=r"no column 'kind' .*set data.reward_fn_key"):
        RLDataset([path], tok, "prompt", 64, reward_fn_key="kind")


def test_ground_truth_optional_for_reward_model_runs(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [{"data_source": "hh", "prompt": [{"role": "user", "content": "hi"}]}])
    data = RLDataset([path], tok, "prompt", 64, need_ground_truth=False)
    assert data.records[0].ground_truth == "" and data.records[0].messages == [{"role": "user", "content": "hi"}]


def test_overlong_prompt_with_truncation_error(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [row(), row("What is " + "1+" * 30 + "1?")])
    with pytest.raises(DataError, match=r"row 1: prompt is \d+ tokens, over data.max_prompt_length=20"):
        RLDataset([path], tok, "prompt", 20)


@pytest.mark.parametrize("mode", ["left", "right"])
def test_truncation_left_and_right(tmp_path, tok, mode):
    long = "What is " + "1+" * 30 + "1?"
    path = write_rows(tmp_path / "a.parquet", [row(long)])
    full = RLDataset([path], tok, "prompt", 200).records[0].prompt_ids
    cut = RLDataset([path], tok, "prompt", 20, truncation=mode).records[0].prompt_ids
    assert cut == (full[-20:] if mode == "left" else full[:20])


def test_filter_overlong_prompts_counts_what_it_drops(tmp_path, tok):
    path = write_rows(tmp_path / "a.parquet", [row(), row("What is " + "1+" * 30 + "1?"), row("What is 2+2?", "4")])
    data = RLDataset([path], tok, "prompt", 20, filter_overlong_prompts=True)
    assert len(data) == 2 and data.num_filtered == 1
    assert [r.index for r in data.records] == [0, 2]


def test_jsonl_files_and_max_samples_across_files(tmp_path, tok):
    import json

    first, second = tmp_path / "a.jsonl", tmp_path / "b.parquet"
    first.write_text("".join(json.dumps(row(f"What is {i}+0?", str(i))) + "\n" for i in range(2)))
    write_rows(second, [row(f"What is {i}+0?", str(i)) for i in range(2, 5)])
    data = RLDataset([str(first), str(second)], tok, "prompt", 64, max_samples=3)
    # the first 3 rows over both files, in order: 0, 1 from a.jsonl, then 2 from b.parquet
    assert [r.ground_truth for r in data.records] == ["0", "1", "2"]
    assert data.records[0].extra_info == {}  # rows without extra_info hand the reward function an empty dict
    assert len(RLDataset([str(first), str(second)], tok, "prompt", 64)) == 5


def test_bad_jsonl_line_names_file_and_line(tmp_path, tok):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": []}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2 is a JSON list, not an object"):
        RLDataset([str(bad)], tok, "prompt", 64)


def test_sft_file_without_its_response_column_names_the_response_key(tmp_path, tok):
    from hybridrl.data.sft import SFTDataset

    path = write_rows(tmp_path / "a.parquet", [{"prompt": [{"role": "user", "content": "hi"}], "answer": "3"}])
    with pytest.raises(DataError, match=r"no column 'extra_info' \(columns: prompt, answer\); set data\.response_key"):
        SFTDataset([path], tok, "prompt", "extra_info.answer", 64, "data.train_files")
    assert len(SFTDataset([path], tok, "prompt", "answer", 64, "data.train_files").examples) == 1


def test_jsonl_that_is_not_utf8_names_file_line_and_byte_offset(tmp_path, tok):
    """Used to be a raw UnicodeDecodeError traceback."""
    import json

    good = json.dumps(row()) + "\n"  # line 1; line 2 holds a Latin-1 "é" (0xe9) after 5 characters
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good.encode() + b'{"a": "caf\xe9"}\n')
    offset = len(good.encode()) + len('{"a": "caf')
    with pytest.raises(DataError, match=f"^data.train_files: {path} line 2 is not UTF-8 text \\(byte 0xe9 at byte "
                                        f"offset {offset} of the file\\); save the file as UTF-8$"):
        RLDataset([str(path)], tok, "prompt", 64)


def test_jsonl_with_a_byte_order_mark_reads(tmp_path, tok):
    import json

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(row()) + "\n").encode())
    assert len(RLDataset([str(path)], tok, "prompt", 64)) == 1


@pytest.mark.parametrize("name, content, message", [
    ("empty.jsonl", b"", "has no rows; give a file with at least one row"),
    ("blank.jsonl", b"\n  \n", "has no rows; give a file with at least one row"),
    ("empty.parquet", b"", "is not a readable parquet file"),
    ("text.parquet", b"prompt,answer\n", "is not a readable parquet file"),
])
def test_empty_and_not_parquet_files_are_one_line(tmp_path, tok, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=re.escape(f"data.train_files: {path} {message}")):
        RLDataset([str(path)], tok, "prompt", 64)


def test_parquet_without_rows_is_one_line(tmp_path, tok):
    path = tmp_path / "zero.parquet"
    pq.write_table(pa.Table.from_pylist([row()]).slice(0, 0), path)
    with pytest.raises(DataError, match=re.escape(f"data.train_files: {path} has no rows")):
        RLDataset([str(path)], tok, "prompt", 64)


def test_a_folder_given_as_a_data_file_says_so(tmp_path, tok):
    with pytest.raises(DataError, match=re.escape(f"data.train_files: {tmp_path} is a folder; give a .parquet or "
                                                  ".jsonl file")):
        RLDataset([str(tmp_path)], tok, "prompt", 64)


def test_overlong_prompt_error_names_the_setting_that_gave_the_limit(tmp_path, tok):
    """`hybridrl eval` passes its flag, so the fix names --max-prompt-length, not the trainer's key."""
    path = write_rows(tmp_path / "a.parquet", [row("What is 1+2?")])
    with pytest.raises(DataError, match=re.escape("prompt is 15 tokens, over --max-prompt-length=4; raise it")):
        RLDataset([path], tok, "prompt", 4, names=DataNames(max_prompt_length="--max-prompt-length", overlong_fix="raise it"))
    with pytest.raises(DataError, match=re.escape("no column 'question' (columns: data_source, prompt, reward_model); set "
                                                  "--prompt-key to the column holding the chat messages")):
        RLDataset([path], tok, "question", 64, names=DataNames(prompt_key="--prompt-key"))
    bad = write_rows(tmp_path / "b.parquet", [{**row(), "data_source": None}])
    with pytest.raises(DataError, match=re.escape("row 0: no 'data_source' value; name the reward scorer of every row "
                                                  "(--reward-fn-key). Leave it out")):
        RLDataset([bad], tok, "prompt", 64, names=DataNames(reward_fn_key="--reward-fn-key", bad_row_fix="Leave it out"))


def test_a_lone_surrogate_in_any_column_is_a_bad_row(tmp_path, tok):
    """extra_info reaches reward code and generation logs, which write UTF-8: refused as well, by its path."""
    path = write_jsonl(tmp_path / "a.jsonl", [row(), {**row(), "extra_info": {"notes": ["fine", "x\udfff"]}}])
    with pytest.raises(DataError, match=re.escape(f"{path} row 1: field 'extra_info.notes[1]' holds a lone "
                                                  "surrogate \\udfff at character 1 (")):
        RLDataset([path], tok, "prompt", 64)


def test_the_eval_names_end_a_lone_surrogate_row_error(tmp_path, tok):
    """`hybridrl eval` reads its data with its own names; the row error ends with its fix, not the trainer's."""
    path = write_jsonl(tmp_path / "a.jsonl", [{**row(), "data_source": "\ud83d"}])
    with pytest.raises(DataError, match=re.escape(f"{path} row 0: field 'data_source' holds a lone surrogate "
                                                  "\\ud83d at character 0 (") + r".*\. Leave it out$"):
        RLDataset([path], tok, "prompt", 64, names=DataNames(bad_row_fix="Leave it out"))


def write_undecodable_parquet(path, good_rows: int) -> str:
    """A parquet file whose 'prompt_text' string column holds, in its last row, the 3-byte form of U+D83D that
    a careless writer (CESU-8) stores: pyarrow reads it, Python's strict UTF-8 decoding refuses it."""
    texts = [b"fine"] * good_rows + [b"\xed\xa0\xbd"]
    offsets = pa.array([4 * i for i in range(good_rows + 1)] + [4 * good_rows + 3], pa.int32())
    bad = pa.Array.from_buffers(pa.string(), len(texts), [None, offsets.buffers()[1], pa.py_buffer(b"".join(texts))])
    table = pa.Table.from_pylist([row() for _ in texts]).append_column("prompt_text", bad)
    pq.write_table(table, path)
    return str(path)


def test_parquet_text_that_is_not_utf8_names_row_and_column(tmp_path, tok):
    """Used to be a raw UnicodeDecodeError traceback from pyarrow's to_pylist."""
    path = write_undecodable_parquet(tmp_path / "cesu.parquet", good_rows=2)
    with pytest.raises(DataError, match=re.escape(f"data.train_files: {path} row 2: column 'prompt_text' holds text "
                                                  "that is not UTF-8 (invalid continuation byte; often a lone "
                                                  "surrogate, half of an emoji); rewrite the row's text as UTF-8")):
        RLDataset([path], tok, "prompt", 64)


def test_sft_rows_with_a_lone_surrogate_name_file_row_and_field(tmp_path, tok):
    from hybridrl.data.sft import SFTDataset

    rows = [{"prompt": [{"role": "user", "content": "hi"}], "answer": "3"},
            {"prompt": [{"role": "user", "content": "hi"}], "answer": "4 \ud83d"}]
    path = write_jsonl(tmp_path / "sft.jsonl", rows)
    with pytest.raises(DataError, match=re.escape(f"{path} row 1: field 'answer' holds a lone surrogate \\ud83d at "
                                                  "character 2 (half of a UTF-16 pair")):
        SFTDataset([path], tok, "prompt", "answer", 64, "data.train_files")


def test_each_prompt_keeps_its_rows_other_columns_for_trl_style_rewards(tmp_path):
    """Issue #48 part 4: the columns of a verl-schema row but the prompt reach the batch (PromptBatch.columns),
    repeated with the prompt's samples, as TRL hands a dataset's columns to its reward functions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hybridrl.models.tiny import build_tokenizer

    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"{i}+1="}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(i + 1)}, "extra_info": {"index": i}}
            for i in range(3)]
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    tok = build_tokenizer()
    data = RLDataset([path], tok, "prompt", 64, "error", False, "data.train_files")
    batch = data.collate([2, 0], tok.pad_token_id).repeat_interleave(2)
    expected = [{k: v for k, v in rows[i].items() if k != "prompt"} for i in (2, 2, 0, 0)]
    assert batch.columns == expected
