"""The synthetic arithmetic task: `What is 23+45?` (or `23+45-7` with --ops +- --max-operands 3),
answered with the number.

Problems are drawn without replacement, so the validation split never repeats a training
problem. Intermediate and final results stay >= 0. The built-in default is two-operand addition:
the bundled 3.5M model reached 48 % on additions but 11 % on subtractions after the same SFT,
and RL cannot reinforce answers it almost never samples.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

from hybridrl.errors import HybridRLError

DATA_SOURCE = "arithmetic"


def make_problems(count: int, seed: int, min_operands: int, max_operands: int, max_value: int,
                  ops: str = "+-") -> list[tuple[str, int]]:
    """`count` distinct (expression, answer) pairs using the operators in `ops`, e.g. ("23+45-7", 61)."""
    if not 2 <= min_operands <= max_operands:
        raise HybridRLError(f"operands: need 2 <= min_operands ({min_operands}) <= max_operands ({max_operands})")
    if not ops or set(ops) - set("+-"):
        raise HybridRLError(f"--ops {ops!r}: use '+', '-' or '+-'")
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    attempts = 0
    while len(seen) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise HybridRLError(
                f"could only draw {len(seen)} distinct problems of the {count} asked; "
                "raise --max-value or --max-operands, or ask for fewer"
            )
        value = rng.randint(0, max_value)
        expr = str(value)
        for _ in range(rng.randint(min_operands, max_operands) - 1):
            operand = rng.randint(0, max_value)
            allowed = ops if operand <= value else ops.replace("-", "")  # keep results >= 0
            if not allowed:
                operand, allowed = rng.randint(0, value), "-"
            op = rng.choice(allowed)
            value = value + operand if op == "+" else value - operand
            expr += f"{op}{operand}"
        seen.setdefault(expr, value)
    return list(seen.items())


def to_row(expr: str, answer: int, split: str, index: int) -> dict:
    """One row in verl's RL parquet schema."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"What is {expr}?"}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": split, "index": index, "question": expr, "answer": str(answer)},
    }


def write_dataset(
    output_dir: str,
    train_size: int = 9000,
    val_size: int = 500,
    seed: int = 0,
    min_operands: int = 2,
    max_operands: int = 2,
    max_value: int = 99,
    ops: str = "+",
) -> dict[str, str]:
    """Write train.parquet and val.parquet (disjoint problems) into output_dir; return their paths."""
    for flag, value in (("--train-size", train_size), ("--val-size", val_size), ("--max-value", max_value)):
        if value < 1:  # an empty split would be written silently, and max_value < 0 has no operand to draw
            raise HybridRLError(f"{flag} {value}: give at least 1" + (
                " (to train without validation, set data.val_files=[])" if flag == "--val-size" else ""))
    problems = make_problems(train_size + val_size, seed, min_operands, max_operands, max_value, ops)
    os.makedirs(output_dir, exist_ok=True)
    splits = {"val": problems[:val_size], "train": problems[val_size:]}
    paths = {}
    for split, items in splits.items():
        rows = [to_row(expr, ans, split, i) for i, (expr, ans) in enumerate(items)]
        paths[split] = os.path.join(output_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), paths[split])
    return paths
