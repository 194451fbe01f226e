"""Turn public math datasets (local jsonl/parquet copies; nothing is downloaded) into verl's RL
parquet schema: data_source, chat-message prompt, ability, reward_model.ground_truth, extra_info."""

from __future__ import annotations

import glob
import os
import re
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from hybridrl.data.dataset import read_rows, require_whole_text
from hybridrl.errors import HybridRLError
from hybridrl.rewards.scorers.math_answer import last_boxed

GSM8K_SOURCE = "openai/gsm8k"
MATH_SOURCE = "HuggingFaceH4/MATH-500"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
GSM8K_FINAL = re.compile(r"#### (\-?[0-9\.\,]+)")


def split_files(input_path: str) -> dict[str, str]:
    """{split: file}: a folder's train/test (or validation) .jsonl/.parquet files, or one file as `test`."""
    if os.path.isfile(input_path):
        return {"test": input_path}
    if not os.path.isdir(input_path):
        raise HybridRLError(f"--input {input_path!r} is neither a file nor a folder")
    found = {}
    for split in ("train", "test"):
        matches = sorted(p for ext in ("jsonl", "parquet") for p in glob.glob(os.path.join(input_path, f"{split}*.{ext}")))
        if matches:
            found[split] = matches[0]
    if not found:
        raise HybridRLError(f"{input_path}: no train*.jsonl/parquet or test*.jsonl/parquet file in it")
    return found


def _field(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise HybridRLError(f"{where}: field {key!r} is missing or not a non-empty string (keys: {sorted(row)})")
    return value


def verl_row(source: str, question: str, instruction: str, truth: str, split: str, index: int, solution: str) -> dict:
    """One row of verl's RL schema; the instruction follows the question in a single user message."""
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": f"{question} {instruction}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": split, "index": index, "question": question, "answer": solution},
    }


def gsm8k_row(row: dict, split: str, index: int, where: str) -> dict:
    question, answer = _field(row, "question", where), _field(row, "answer", where)
    final = GSM8K_FINAL.findall(answer)
    if not final:
        raise HybridRLError(f"{where}: the answer has no '#### <number>' line")
    return verl_row(GSM8K_SOURCE, question, GSM8K_INSTRUCTION, final[-1].replace(",", ""), split, index, answer)


def math_row(row: dict, split: str, index: int, where: str) -> dict:
    question = _field(row, "problem", where)
    solution = row.get("solution") or ""
    truth = row.get("answer") if isinstance(row.get("answer"), str) else last_boxed(solution)
    if not truth:
        raise HybridRLError(f"{where}: no 'answer' field and no \\boxed{{}} in 'solution'")
    if truth.replace(",", "").isdigit():  # "10,080" -> "10080"; a tuple such as "(1,2)" keeps its commas
        truth = truth.replace(",", "")
    return verl_row(MATH_SOURCE, question, MATH_INSTRUCTION, truth, split, index, solution)


CONVERTERS: dict[str, Callable[[dict, str, int, str], dict]] = {"gsm8k": gsm8k_row, "math": math_row}


def convert(dataset: str, input_path: str, output_dir: str) -> dict[str, str]:
    """Write <output_dir>/<split>.parquet for each split found; return {split: path}."""
    to_row = CONVERTERS[dataset]
    os.makedirs(output_dir, exist_ok=True)
    paths = {}
    for split, path in split_files(input_path).items():
        records: Iterable[dict] = read_rows(path, "--input")
        rows = []
        for i, r in enumerate(records):
            require_whole_text(r, f"{path} row {i}")  # else pyarrow's writer fails on it, naming no row
            rows.append(to_row(r, split, i, f"{path} row {i}"))
        paths[split] = os.path.join(output_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), paths[split])
    return paths
