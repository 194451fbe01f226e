import re

import pyarrow.parquet as pq
import pytest

from hybridrl.data.arithmetic import make_problems, write_dataset
from hybridrl.errors import HybridRLError


def test_problems_are_distinct_and_answers_are_right():
    problems = make_problems(500, seed=3, min_operands=2, max_operands=3, max_value=20)
    exprs = [e for e, _ in problems]
    assert len(set(exprs)) == 500
    for expr, answer in problems:
        assert eval(expr) == answer  # the expression is plain +/- integer arithmetic
        assert answer >= 0
    assert {len([c for c in e if c in "+-"]) + 1 for e in exprs} == {2, 3}


def test_same_seed_same_problems_other_seed_other_problems():
    a = make_problems(50, 1, 2, 2, 99)
    assert a == make_problems(50, 1, 2, 2, 99)
    assert a != make_problems(50, 2, 2, 2, 99)


def test_too_many_problems_is_a_clear_error():
    # 2 operands in 0..2: 9 additions + 6 non-negative subtractions = 15 distinct problems
    with pytest.raises(HybridRLError, match="could only draw 15 distinct problems"):
        make_problems(16, 0, 2, 2, 2)


def test_splits_are_disjoint_and_in_verl_schema(tmp_path):
    paths = write_dataset(str(tmp_path), train_size=100, val_size=30, seed=0)
    train, val = pq.read_table(paths["train"]).to_pylist(), pq.read_table(paths["val"]).to_pylist()
    assert (len(train), len(val)) == (100, 30)
    assert not {r["extra_info"]["question"] for r in train} & {r["extra_info"]["question"] for r in val}
    row = train[0]
    assert row["data_source"] == "arithmetic"
    assert row["prompt"] == [{"role": "user", "content": f"What is {row['extra_info']['question']}?"}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": row["extra_info"]["answer"]}


@pytest.mark.parametrize("ops", ["+", "-"])
def test_ops_restricts_the_operators(ops):
    problems = make_problems(200, seed=1, min_operands=2, max_operands=3, max_value=50, ops=ops)
    other = "-" if ops == "+" else "+"
    assert all(other not in e and ops in e for e, _ in problems)
    assert all(eval(e) == a and a >= 0 for e, a in problems)


def test_unknown_operator_is_an_error():
    with pytest.raises(HybridRLError, match=r"--ops '\*': use '\+', '-' or '\+-'"):
        make_problems(5, 0, 2, 2, 9, ops="*")


def test_default_dataset_is_two_operand_addition(tmp_path):
    rows = pq.read_table(write_dataset(str(tmp_path), train_size=50, val_size=10)["train"]).to_pylist()
    assert all(r["extra_info"]["question"].count("+") == 1 and "-" not in r["extra_info"]["question"] for r in rows)


@pytest.mark.parametrize("kwargs, message", [
    (dict(train_size=-5), "--train-size -5: give at least 1"),  # wrote an empty train.parquet and exited 0
    (dict(train_size=0), "--train-size 0: give at least 1"),
    (dict(val_size=0), "--val-size 0: give at least 1 (to train without validation, set data.val_files=[])"),
    (dict(max_value=-1), "--max-value -1: give at least 1"),  # was randrange's ValueError traceback
])
def test_sizes_that_would_write_nothing_are_refused(tmp_path, kwargs, message):
    with pytest.raises(HybridRLError, match=f"^{re.escape(message)}$"):
        write_dataset(str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out").exists()
