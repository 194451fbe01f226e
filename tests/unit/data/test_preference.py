"""Preference pairs: both row layouts, margins, the [2B, L] batch layout and one-line errors."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from hybridrl.data.dataset import encode_prompts
from hybridrl.data.preference import PreferenceColumns, PreferenceDataset
from hybridrl.errors import DataError
from hybridrl.models.loading import load_tokenizer

COLS = PreferenceColumns()


@pytest.fixture(scope="module")
def tok(random_model_dir):
    return load_tokenizer(random_model_dir)


def chat_row(q, good, bad, **extra):
    return {"prompt": [{"role": "user", "content": q}], "chosen": [{"role": "assistant", "content": good}],
            "rejected": [{"role": "assistant", "content": bad}], **extra}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_chat_parquet_and_plain_jsonl_rows_give_the_same_tokens(tok, tmp_path):
    chat = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([chat_row("1+1=?", "2", "3"), chat_row("2+2=?", "4", "5")]), chat)
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "1+1=?", "chosen": "2", "rejected": "3"},
                                                   {"prompt": "2+2=?", "chosen": "4", "rejected": "5"}])
    a = PreferenceDataset([str(chat)], tok, COLS, 64, "data.train_files")
    b = PreferenceDataset([plain], tok, COLS, 64, "data.train_files")
    assert a.pairs == b.pairs and len(a) == 2
    pair = a.pairs[0]
    # the RL trainer's prompt encoding (generation prompt included), then the response and EOS
    assert pair.prompt_ids == encode_prompts(tok, [[{"role": "user", "content": "1+1=?"}]])[0]
    assert pair.chosen_ids == tok("2", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert pair.rejected_ids[-1] == tok.eos_token_id and pair.margin == 0.0


def test_margin_column_is_read(tok, tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [chat_row("a", "b", "c", margin=1.5), chat_row("d", "e", "f", margin=0)])
    assert [p.margin for p in PreferenceDataset([path], tok, COLS, 64, "k").pairs] == [1.5, 0.0]


def test_collate_stacks_chosen_then_rejected_right_padded(tok, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chat_row("q", "a much longer answer", "x", margin=0.5),
                                              chat_row("q", "y", "z", margin=2.0)])
    data = PreferenceDataset([path], tok, COLS, 64, "k")
    batch = data.collate([1, 0], pad_id=tok.pad_token_id)
    p0, p1 = data.pairs[0], data.pairs[1]
    seqs = [p1.prompt_ids + p1.chosen_ids, p0.prompt_ids + p0.chosen_ids,
            p1.prompt_ids + p1.rejected_ids, p0.prompt_ids + p0.rejected_ids]
    assert batch.input_ids.shape == (4, max(map(len, seqs))) and batch.num_pairs == 2
    for row, seq in enumerate(seqs):
        assert batch.input_ids[row, :len(seq)].tolist() == seq
        assert batch.attention_mask[row].tolist() == [1] * len(seq) + [0] * (batch.input_ids.shape[1] - len(seq))
    torch.testing.assert_close(batch.margin, torch.tensor([2.0, 0.5]))


@pytest.mark.parametrize("rows, message", [
    ([{"prompt": "q", "chosen": "a"}], "no column 'rejected'"),
    ([chat_row("q", "same", "same"), chat_row("r", "also", "also")], "in every row 'chosen' and 'rejected' are the same"),
    ([chat_row("q " * 80, "a", "b")], "over data.max_length=64"),
    ([{"prompt": "q", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"}], "one assistant message"),
    ([{"prompt": "q", "chosen": "", "rejected": "b"}], "must be a non-empty response"),
    ([{"prompt": [], "chosen": "a", "rejected": "b"}], "column 'prompt' must be a non-empty string"),
    ([chat_row("q", "a", "b", margin=1.0), chat_row("q", "c", "d")], "column 'margin' must be a finite number"),
])
def test_bad_rows_are_one_line_errors_naming_the_row_and_the_fix(tok, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=message) as e:
        PreferenceDataset([path], tok, COLS, 64, "data.train_files")
    assert "\n" not in str(e.value) and ("bad.jsonl" in str(e.value) or "data.train_files" in str(e.value))


def test_some_identical_pairs_are_counted_not_refused(tok, tmp_path):
    path = write_jsonl(tmp_path / "i.jsonl", [chat_row("q", "same", "same"), chat_row("r", "a", "b")])
    assert PreferenceDataset([path], tok, COLS, 64, "k").num_identical == 1


def test_a_lone_surrogate_names_the_file_row_and_field(tok, tmp_path):
    """json.dumps writes "\\ud83d" (half of an emoji's UTF-16 pair); the tokenizer used to raise a bare TypeError."""
    path = write_jsonl(tmp_path / "s.jsonl", [chat_row("q", "a", "b"), chat_row("q", "a", "b \ud83d")])
    with pytest.raises(DataError, match=re.escape(f"{path} row 1: field 'rejected[0].content' holds a lone surrogate "
                                                  "\\ud83d at character 2 (half of a UTF-16 pair")):
        PreferenceDataset([path], tok, COLS, 64, "data.train_files")


def conversation(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": content} for role, content in turns]


SHARED = (("system", "Be brief."), ("user", "1+1=?"), ("assistant", "2"), ("user", "and 2+2?"))


def test_implicit_prompt_rows_are_the_explicit_pairs_split_at_the_shared_messages(tok, tmp_path):
    """TRL's implicit-prompt layout: no prompt column; the messages both conversations begin with are the prompt."""
    implicit = [{"chosen": conversation(*SHARED, ("assistant", "4")),
                 "rejected": conversation(*SHARED, ("assistant", "5")), "margin": 1.0},
                {"chosen": conversation(("user", "3+3=?"), ("assistant", "6")),
                 "rejected": conversation(("user", "3+3=?"), ("assistant", "7")), "margin": 0.0}]
    explicit = [{"prompt": conversation(*SHARED), "chosen": "4", "rejected": "5", "margin": 1.0},
                {"prompt": "3+3=?", "chosen": "6", "rejected": "7", "margin": 0.0}]
    parquet = tmp_path / "implicit.parquet"
    pq.write_table(pa.Table.from_pylist(implicit), parquet)
    expected = PreferenceDataset([write_jsonl(tmp_path / "explicit.jsonl", explicit)], tok, COLS, 128, "k").pairs
    for path in (write_jsonl(tmp_path / "implicit.jsonl", implicit), str(parquet)):
        pairs = PreferenceDataset([path], tok, COLS, 128, "k").pairs
        assert pairs == expected
    assert pairs[0].prompt_ids == encode_prompts(tok, [conversation(*SHARED)])[0]
    assert pairs[0].chosen_ids == tok("4", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert [p.margin for p in pairs] == [1.0, 0.0]


IMPLICIT_FIX = ("set data.prompt_key to the column holding the prompts, or begin both conversations with the prompt's "
                "messages")


@pytest.mark.parametrize("chosen, rejected, message", [
    ("Q: 1+1? A: 2", "Q: 1+1? A: 3",
     ", but both are plain strings, where the end of the prompt is a guess; put the prompt in a 'prompt' column and "
     "only the responses in 'chosen' and 'rejected', or write both as lists of {'role': str, 'content': str} "
     "messages that begin with the prompt's messages"),
    (conversation(("user", "1+1?"), ("assistant", "2")), conversation(("user", "1+2?"), ("assistant", "3")),
     f", but their first messages differ, so there is no prompt; {IMPLICIT_FIX}"),
    # a file whose prompt column has another name than data.prompt_key
    (conversation(("assistant", "2")), conversation(("assistant", "3")),
     f", but their first messages differ, so there is no prompt; {IMPLICIT_FIX}"),
    (conversation(("user", "1+1?"), ("assistant", "2")), conversation(("user", "1+1?"), ("assistant", "2")),
     ", but the two conversations are identical, so there is no response to compare; fix or delete the row"),
    (conversation(("user", "1+1?"), ("assistant", "2"), ("user", "sure?"), ("assistant", "yes")),
     conversation(("user", "1+1?"), ("assistant", "3"), ("user", "sure?"), ("assistant", "yes")),
     "; after the 1 shared message(s) 'chosen' must have exactly one assistant message (its response), got roles "
     "['assistant', 'user', 'assistant']; make the earlier turns of both conversations the same, or give the prompt "
     "its own column"),
    (conversation(("user", "1+1?")), conversation(("user", "1+1?"), ("assistant", "3")),
     "; after the 1 shared message(s) 'chosen' must have exactly one assistant message (its response), got roles "
     "[]; make the earlier turns of both conversations the same, or give the prompt its own column"),
    (conversation(("user", "1+1?"), ("assistant", "2")), "3",
     ", but 'rejected' is not a list of {'role': str, 'content': str} messages (got '3'); " + IMPLICIT_FIX),
])
def test_implicit_prompt_rows_that_cannot_be_split_name_the_row_and_the_fix(tok, tmp_path, chosen, rejected, message):
    good = {"chosen": conversation(("user", "q"), ("assistant", "a")),
            "rejected": conversation(("user", "q"), ("assistant", "b"))}
    path = write_jsonl(tmp_path / "implicit.jsonl", [good, {"chosen": chosen, "rejected": rejected}])
    with pytest.raises(DataError) as e:
        PreferenceDataset([path], tok, COLS, 64, "data.train_files")
    assert str(e.value) == (f"{path} row 1: no 'prompt' column, so the prompt is the messages 'chosen' and 'rejected' "
                            "begin with (TRL's implicit-prompt layout)" + message)
