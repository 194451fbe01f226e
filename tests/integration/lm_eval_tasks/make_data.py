"""Write the JSON-lines files the task YAMLs beside this file read (their `data_files` are relative to the folder
lm_eval runs in):

    python tests/integration/lm_eval_tasks/make_data.py GSM8K_TEST_JSONL MODEL_FOLDER [OUT_FOLDER]

gsm8k_sample.jsonl: the first GSM8K rows ({"question", "answer"}, as in GSM8K's test.jsonl) whose prompt leaves room
for the answer in the model's context, so that no evaluator truncates one; arith_mc.jsonl: two-operand additions
(the bundled tiny-arith's task), each with the right sum and three near misses in a random order.
tests/integration/test_lm_eval.py writes them the same way.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from hybridrl.data.arithmetic import make_problems

GEN_TOKENS = 32  # hybridrl_gsm8k_sample.yaml's max_gen_toks


def write_gsm8k_sample(source: Path, folder: Path, tokenizer, rows: int = 6, context: int = 256) -> int:
    """The first `rows` rows of `source` whose prompt plus GEN_TOKENS fits `context` - 1 tokens (lm_eval's API
    models keep one token of the context back); returns how many were written."""
    kept = []
    with open(source) as f:
        for line in f:
            row = json.loads(line)
            prompt = f"Question: {row['question']}\nAnswer:"  # the task's doc_to_text
            if len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) + GEN_TOKENS < context - 1:
                kept.append(row)
            if len(kept) == rows:
                break
    (folder / "gsm8k_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    return len(kept)


def write_arith_mc(folder: Path, rows: int = 16) -> None:
    """`rows` additions with four choices each; the right one's index is `answer`."""
    rng = random.Random(0)
    out = []
    for expr, answer in make_problems(rows, seed=123, min_operands=2, max_operands=2, max_value=99, ops="+"):
        wrong = rng.sample([d for d in (-10, -2, -1, 1, 2, 10) if answer + d >= 0], 3)
        choices = [str(answer)] + [str(answer + d) for d in wrong]
        rng.shuffle(choices)
        out.append({"expression": expr, "choices": choices, "answer": choices.index(str(answer))})
    (folder / "arith_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    from transformers import AutoTokenizer

    out = Path(argv[2] if len(argv) == 3 else ".")
    out.mkdir(parents=True, exist_ok=True)
    written = write_gsm8k_sample(Path(argv[0]), out, AutoTokenizer.from_pretrained(argv[1]))
    write_arith_mc(out)
    print(f"wrote {out / 'gsm8k_sample.jsonl'} ({written} rows) and {out / 'arith_mc.jsonl'}")


if __name__ == "__main__":
    main(sys.argv[1:])
