"""hybridrl/api/data.py: every accepted kind of data becomes the same verl-schema parquet rows."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.api.data import DEFAULT_SOURCE, to_rows, write_split
from hybridrl.errors import DataError

VERL_ROWS = [
    {"data_source": "arithmetic", "prompt": [{"role": "user", "content": "What is 1+2?"}], "ability": "arithmetic",
     "reward_model": {"style": "rule", "ground_truth": "3"}, "extra_info": {"index": 0}},
    {"data_source": "arithmetic", "prompt": [{"role": "user", "content": "What is 2+2?"}], "ability": "arithmetic",
     "reward_model": {"style": "rule", "ground_truth": "4"}, "extra_info": {"index": 1}},
]
TRL_ROWS = [{"prompt": "What is 1+2?", "answer": 3}, {"prompt": "What is 2+2?", "answer": 4}]


def read(path: str) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_verl_rows_are_written_as_given(tmp_path):
    written = write_split(VERL_ROWS, str(tmp_path), "train")
    assert read(written.path) == VERL_ROWS
    assert os.path.dirname(written.path) == str(tmp_path) and not written.text_prompts


def test_trl_rows_get_a_user_message_the_default_source_and_their_columns_in_extra_info(tmp_path):
    written = write_split(TRL_ROWS, str(tmp_path), "train", own_reward=True)
    assert written.text_prompts
    assert read(written.path) == [
        {"prompt": [{"role": "user", "content": "What is 1+2?"}], "data_source": DEFAULT_SOURCE,
         "reward_model": {"ground_truth": ""}, "extra_info": {"answer": 3}},
        {"prompt": [{"role": "user", "content": "What is 2+2?"}], "data_source": DEFAULT_SOURCE,
         "reward_model": {"ground_truth": ""}, "extra_info": {"answer": 4}},
    ]


def test_a_ground_truth_column_becomes_reward_model_ground_truth_as_text(tmp_path):
    rows = [{"prompt": "q", "ground_truth": 7, "data_source": "arithmetic"}]
    (row,) = read(write_split(rows, str(tmp_path), "val").path)
    assert row["reward_model"] == {"ground_truth": "7"} and row["extra_info"] == {"ground_truth": 7}


@pytest.mark.parametrize("kind", ["list", "tuple", "arrow", "pandas", "datasets"])
def test_every_kind_of_data_gives_the_same_rows(tmp_path, kind):
    if kind in ("pandas", "datasets"):
        module = pytest.importorskip(kind, reason=f"{kind} is not installed (optional: only recognised when given)")
    data = {"list": lambda r: r, "tuple": tuple, "arrow": pa.Table.from_pylist,
            "pandas": lambda r: module.DataFrame(r), "datasets": lambda r: module.Dataset.from_list(r)}[kind]
    for rows in (VERL_ROWS, TRL_ROWS):
        expected = write_split(rows, str(tmp_path / "list"), "train", own_reward=True)
        got = write_split(data(rows), str(tmp_path / kind), "train", own_reward=True)
        assert read(got.path) == read(expected.path) and got.text_prompts == expected.text_prompts
        assert os.path.basename(got.path) == os.path.basename(expected.path)  # the name is the content's hash


def test_the_file_name_follows_the_content(tmp_path):
    a = write_split(TRL_ROWS, str(tmp_path), "train", own_reward=True).path
    again = write_split([dict(r) for r in TRL_ROWS], str(tmp_path), "train", own_reward=True).path
    other = write_split(TRL_ROWS[:1], str(tmp_path), "train", own_reward=True).path
    assert a == again != other
    assert sorted(os.listdir(tmp_path)) == sorted({os.path.basename(a), os.path.basename(other)})  # no temp file left


def test_a_path_is_used_as_it_is(tmp_path):
    assert write_split(str(tmp_path / "x.parquet"), str(tmp_path), "train").path == str(tmp_path / "x.parquet")


@pytest.mark.parametrize("rows, own_reward, message", [
    ([{"question": "q"}], True, r"train data row 0 has no 'prompt'; give each row its prompt as text or as chat"),
    ([{"prompt": 3}], True, r"train data row 0 has a int as its 'prompt'"),
    ([{"prompt": "q"}], False, r"train data row 0 has no 'data_source', which picks the built-in scorer; give it "
                               r"\(e.g. 'arithmetic'\), or pass reward="),
    ([{"prompt": "q", "x": 1, "extra_info": {"x": 2}}], True, r"row 0: 'x' is both a column and a key of extra_info"),
    ([{"prompt": "q", "reward_model": "3"}], True, r"row 0: reward_model is a str, not a dict"),
    ([{"prompt": "q", "n": 1}, {"prompt": "r", "n": "one"}], True, r"cannot store the rows as parquet .*one type"),
    ([], True, r"train data: no rows"),
    (["What is 1+2?"], True, r"train data row 0 is a str, not a dict of columns"),
])
def test_bad_rows_are_named_with_the_fix(tmp_path, rows, own_reward, message):
    with pytest.raises(DataError, match=message):
        write_split(rows, str(tmp_path), "train", own_reward=own_reward)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_an_unknown_kind_of_data_lists_the_accepted_ones():
    with pytest.raises(DataError, match="give a list of dicts, a pyarrow Table, a pandas DataFrame, a datasets"):
        to_rows({"prompt": ["q"]}, "train data")
