"""Tool-use statistics of a model on the tool_calc validation prompts (multi-turn, calculator).

`hybridrl eval` samples single-turn responses only, so this runs the same multi-turn rollout the
trainer uses (MultiTurnEngine around the hf engine) and reports, over all samples:

  call rate        share of responses whose first turn is a tool call (any <tool_call>...</tool_call>)
  well-formed      calls the calculator ran without error
  operands copied  calls whose expression is exactly the question's "a+b"
  result copied    calls followed by a final answer equal to the tool's result
  accuracy         reward (the last integer the model writes is the sum), split by called / not called

    .venv/bin/python examples/tool_calc/tool_stats.py build/tool_calc/sft --n 4 --temperature 1

It also reads the rows the trainer dumps with trainer.validation_data_dir (--dump DIR/STEP.jsonl).
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


def from_model(args) -> tuple[list[dict], list[str]]:
    import torch

    from hybridrl.config.schema import MultiTurnConfig
    from hybridrl.data.dataset import RLDataset
    from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
    from hybridrl.rollout.base import SamplingParams, generate_rollout
    from hybridrl.rollout.hf import HFRolloutEngine
    from hybridrl.rollout.multi_turn import with_tools

    torch.manual_seed(args.seed)
    tokenizer, model = load_tokenizer(args.model), load_causal_lm(args.model)
    model.eval()
    mt = MultiTurnConfig(enable=True, max_assistant_turns=2, tool_config_path=args.tools)
    engine = with_tools(HFRolloutEngine(model, eos_token_ids(model, tokenizer), tokenizer.pad_token_id), tokenizer, mt)
    data = RLDataset([args.data], tokenizer, "prompt", 64)
    sampling = SamplingParams(max_new_tokens=args.max_response_length, temperature=args.temperature,
                              do_sample=args.temperature > 0)
    rows, texts = [], []
    idx = list(range(min(len(data), args.max_samples)))
    with torch.no_grad():
        for start in range(0, len(idx), 64):
            prompts = data.collate(idx[start:start + 64], tokenizer.pad_token_id)
            rollout = generate_rollout(engine, prompts, args.n, sampling, stream="val")
            outs = tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in
                                           zip(rollout.response_ids, rollout.response_attention())])
            for i, text in enumerate(outs):
                p = i // args.n
                gt = prompts.ground_truth[p]
                q = re.search(r"What is (\d+\+\d+)\?", tokenizer.decode(
                    prompts.input_ids[p][prompts.attention_mask[p].bool()].tolist())).group(1)
                rows.append(row_stats(q, gt, text))
                texts.append(text)
    return rows, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="model folder (omit with --dump)")
    ap.add_argument("--dump", help="a validation_data_dir/<step>.jsonl file to read instead of sampling")
    ap.add_argument("--data", default="data/tool_calc/val.parquet")
    ap.add_argument("--tools", default="examples/tool_calc/tools.yaml")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-response-length", type=int, default=160)
    ap.add_argument("--max-samples", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=3, help="print this many responses")
    args = ap.parse_args()
    if args.dump:
        rows, texts = from_dump(args.dump), []
    else:
        rows, texts = from_model(args)
    for t in texts[:args.show]:
        print(repr(t))
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in summarize(rows).items()}))


if __name__ == "__main__":
    main()
