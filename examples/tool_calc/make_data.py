"""Data for the tool-use example: additions of two 4-digit numbers, which the bundled tiny model
(trained on sums below 200) cannot do in its head but can do by calling the calculator.

Writes into --out (default data/tool_calc):
  train.parquet, val.parquet   RL rows in verl's schema (data_source "arithmetic": the last
                               integer of the model's own text must be the sum)
  sft_train.parquet, sft_val.parquet
                               a small warm-start set: the first turn either calls the
                               calculator (--call-frac of the rows) or guesses directly; and the
                               turn after a tool response copies its number. The tiny model has
                               never seen a tool call; this teaches the format, and RL then has to
                               find out that calling pays.
"""

from __future__ import annotations

import argparse
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq


def tool_call(expr: str) -> str:
    # compact JSON (no spaces): 80 tokens for the tiny model's byte-level vocabulary
    args = {"name": "calculator", "arguments": {"expression": expr}}
    return "<tool_call>" + json.dumps(args, separators=(",", ":")) + "</tool_call>"


def tool_message(result: str) -> dict:
    # the same text the rollout's ChatDelta wraps a tool answer in, so SFT and RL tokens agree
    return {"role": "tool", "content": f"<tool_response>\n{result}\n</tool_response>"}


def problems(count: int, rng: random.Random, seen: set) -> list[tuple[str, int]]:
    out = []
    while len(out) < count:
        a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
        if (a, b) not in seen:
            seen.add((a, b))
            out.append((f"{a}+{b}", a + b))
    return out


def rl_row(expr: str, answer: int, split: str, i: int) -> dict:
    return {"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"What is {expr}?"}],
            "ability": "arithmetic", "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": i, "question": expr, "answer": str(answer)}}


def sft_rows(items: list[tuple[str, int]], call_frac: float, rng: random.Random) -> list[dict]:
    rows = []
    for expr, answer in items:
        user = {"role": "user", "content": f"What is {expr}?"}
        if rng.random() < call_frac:  # call, then read the answer off the tool response
            rows.append({"prompt": [user], "response": tool_call(expr)})
            rows.append({"prompt": [user, {"role": "assistant", "content": tool_call(expr)}, tool_message(str(answer))],
                         "response": str(answer)})
        else:  # answer directly (the model cannot compute this: it learns to guess a 4-5 digit number)
            rows.append({"prompt": [user], "response": str(answer)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/tool_calc")
    ap.add_argument("--rl-train", type=int, default=4000)
    ap.add_argument("--rl-val", type=int, default=128)
    ap.add_argument("--sft", type=int, default=3000, help="problems in the warm-start set")
    ap.add_argument("--call-frac", type=float, default=0.3, help="share of warm-start problems solved with the tool")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng, seen = random.Random(args.seed), set()
    os.makedirs(args.out, exist_ok=True)
    val, train = problems(args.rl_val, rng, seen), problems(args.rl_train, rng, seen)
    sft_val, sft = problems(64, rng, seen), problems(args.sft, rng, seen)
    tables = {"val": [rl_row(e, a, "val", i) for i, (e, a) in enumerate(val)],
              "train": [rl_row(e, a, "train", i) for i, (e, a) in enumerate(train)],
              "sft_train": sft_rows(sft, args.call_frac, rng), "sft_val": sft_rows(sft_val, args.call_frac, rng)}
    for name, rows in tables.items():
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(args.out, f"{name}.parquet"))
        print(f"{args.out}/{name}.parquet: {len(rows)} rows")


if __name__ == "__main__":
    main()
