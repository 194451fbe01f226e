"""Easy arithmetic for SmolLM2-135M-Instruct: `What is 7 + 5? Answer with only the number.`

The bundled task's problems (`hybridrl data arithmetic`) go up to 99 + 99 and ask for the number
alone; the 4-bit SmolLM2 rarely answers those at all (0 of 64 samples at temperature 1), so a
right/wrong reward would give it nothing to learn from. Operands up to 20 and an explicit
instruction leave it a few correct and concise answers per group to reinforce.

Run: .venv/bin/python examples/smollm2_arith/make_data.py [--output data/smollm2_arith]
"""

import argparse
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = "Answer with only the number."


def rows(problems, split: str) -> list[dict]:
    return [{"data_source": "smollm2_arith",
             "prompt": [{"role": "user", "content": f"What is {a} + {b}? {INSTRUCTION}"}],
             "ability": "arithmetic",
             "reward_model": {"style": "rule", "ground_truth": str(a + b)},
             "extra_info": {"split": split, "index": i}} for i, (a, b) in enumerate(problems)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="data/smollm2_arith")
    parser.add_argument("--max-value", type=int, default=20)
    parser.add_argument("--val-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    problems = [(a, b) for a in range(args.max_value + 1) for b in range(args.max_value + 1)]
    random.Random(args.seed).shuffle(problems)  # disjoint splits: validation never repeats a training problem
    os.makedirs(args.output, exist_ok=True)
    for split, part in (("val", problems[:args.val_size]), ("train", problems[args.val_size:])):
        path = os.path.join(args.output, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows(part, split)), path)
        print(f"wrote {path} ({len(part)} problems)")


if __name__ == "__main__":
    main()
