"""Tool-use statistics that `hybridrl eval` does not give, read off a dump of tool_calc generations.

`hybridrl eval --tool-config examples/tool_calc/tools.yaml` reports accuracy (reward mean@n), the
share of responses with a tool call run (`tool_call_counts/frac_with_call`), calls per response and
tool errors. This script reads the text of each response for what needs the question itself:

  call rate        share of responses with any <tool_call>...</tool_call> (also calls never run:
                   malformed ones, or one in the last allowed turn)
  well-formed      calls the calculator ran without error
  operands copied  calls whose expression is exactly the question's "a+b"
  result copied    calls followed by a final answer equal to the tool's result
  accuracy         reward (the last integer the model writes is the sum), split by called / not called

    .venv/bin/hybridrl eval --model build/tool_calc/sft --data data/tool_calc/val.parquet --n 2 \
        --max-prompt-length 32 --max-response-length 160 --tool-config examples/tool_calc/tools.yaml \
        --max-assistant-turns 2 --dump build/tool_calc/sft_eval.jsonl
    .venv/bin/python examples/tool_calc/tool_stats.py --dump build/tool_calc/sft_eval.jsonl

It reads the trainer's trainer.validation_data_dir files (DIR/STEP.jsonl) the same way.
"""

from __future__ import annotations

import argparse
import json
import re

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
RESULT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
INT = re.compile(r"-?\d+")


def row_stats(question: str, answer: str, output: str) -> dict:
    """One response's tool use, read off its text (tool turns included, as the trainer dumps them)."""
    calls = CALL.findall(output)
    s = {"called": bool(calls), "well_formed": False, "operands": False, "copied": False, "correct": False}
    model_text = RESULT.sub("", output)  # the tool's numbers are not the model's
    numbers = INT.findall(CALL.sub("", model_text)) or INT.findall(model_text)
    s["correct"] = bool(numbers) and int(numbers[-1]) == int(answer)
    if calls:
        try:
            expr = json.loads(calls[0])["arguments"]["expression"]
            s["operands"] = expr.replace(" ", "") == question
        except (ValueError, KeyError, TypeError):
            pass
        results = RESULT.findall(output)
        s["well_formed"] = bool(results) and not results[0].startswith("Error")
        tail = output.split("</tool_response>", 1)[1] if "</tool_response>" in output else ""
        tail_numbers = INT.findall(CALL.sub("", tail))
        s["copied"] = bool(results) and bool(tail_numbers) and tail_numbers[-1] == results[0].strip()
    return s


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    called = [r for r in rows if r["called"]]
    direct = [r for r in rows if not r["called"]]
    mean = lambda xs, k: sum(x[k] for x in xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {"samples": n, "call_rate": len(called) / n, "well_formed": mean(called, "well_formed"),
            "operands_copied": mean(called, "operands"), "result_copied": mean(called, "copied"),
            "accuracy": mean(rows, "correct"), "accuracy_called": mean(called, "correct"),
            "accuracy_direct": mean(direct, "correct")}


def from_dump(path: str) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            q = re.search(r"What is (\d+\+\d+)\?", r["input"]).group(1)
            out.append(row_stats(q, r["gts"], r["output"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", required=True,
                    help="generations as JSONL: `hybridrl eval --dump` or trainer.validation_data_dir/<step>.jsonl")
    args = ap.parse_args()
    rows = from_dump(args.dump)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in summarize(rows).items()}))


if __name__ == "__main__":
    main()
