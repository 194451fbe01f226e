"""Prompt data given from Python, written as a parquet file in verl's row schema, so that a run reads exactly
what the CLI reads (the local driver, Ray's workers and a resumed run alike).

Accepted: a list of dicts, a pyarrow Table, a pandas DataFrame, a datasets.Dataset (pandas and datasets are
never imported here: a value of theirs is recognised by its module), or a path to a parquet/jsonl file (used
as is). Each row in verl's schema or TRL's:

- `prompt` (data.prompt_key): chat messages [{"role": "user", "content": ...}], or plain text (TRL's standard
  format), stored as one user message;
- `data_source` (data.reward_fn_key): picks the built-in scorer; optional when a reward function is given
  (then DEFAULT_SOURCE, which also names the validation metrics: val-core/custom/...);
- `reward_model.ground_truth`, else a `ground_truth` column (stored as text); with a reward function of your own
  it may be absent ("");
- `extra_info` (a dict) and every other column (TRL passes a dataset's other columns to its reward functions):
  stored together in extra_info, which reaches the reward functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

import pyarrow as pa
import pyarrow.parquet as pq

from hybridrl.errors import DataError

DEFAULT_SOURCE = "custom"
VERL_COLUMNS = ("reward_model", "extra_info", "ability")  # kept in their place; any other column joins extra_info
PromptData = Union[list, tuple, pa.Table, str, os.PathLike, Any]  # Any: a pandas DataFrame or datasets.Dataset


@dataclass(frozen=True)
class Written:
    """One materialised split."""

    path: str  # the parquet file (or the user's own file, used as is)
    text_prompts: bool  # every prompt was plain text (TRL's standard format): reward functions get text


def to_rows(data: Any, what: str) -> list[dict]:
    """The rows of a list of dicts, a pyarrow Table, a pandas DataFrame or a datasets.Dataset, as dicts."""
    library = type(data).__module__.split(".")[0]
    if isinstance(data, pa.Table):
        return data.to_pylist()
    if library == "pandas" and hasattr(data, "columns"):
        return pa.Table.from_pandas(data, preserve_index=False).to_pylist()  # numpy cells become lists
    if library == "datasets":
        if not hasattr(data, "to_list"):  # a DatasetDict, an IterableDataset
            raise DataError(f"{what}: a datasets.{type(data).__name__}; give one split as a datasets.Dataset "
                            "(e.g. ds['train'], or Dataset.from_list(list(iterable_ds)))")
        return data.to_list()
    if isinstance(data, (list, tuple)):
        for i, row in enumerate(data):
            if not isinstance(row, Mapping):
                raise DataError(f"{what} row {i} is a {type(row).__name__}, not a dict of columns")
        return [dict(row) for row in data]
    raise DataError(f"{what}: a {type(data).__name__}; give a list of dicts, a pyarrow Table, a pandas DataFrame, "
                    "a datasets.Dataset or a parquet/jsonl file path")


def verl_row(row: dict, i: int, what: str, prompt_key: str, source_key: str, own_reward: bool) -> dict:
    """One row in verl's schema (see the module docstring); `own_reward`: a reward function given from Python
    scores it (data_source and ground truth may be absent). A DataError names the row and the fix."""
    where = f"{what} row {i}"
    prompt = row.get(prompt_key)
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    elif prompt is None or not isinstance(prompt, (list, tuple)):
        got = "no" if prompt is None else f"a {type(prompt).__name__} as its"
        raise DataError(f"{where} has {got} {prompt_key!r}; give each row its prompt as text or as chat messages "
                        f"[{{'role': 'user', 'content': ...}}] (data.prompt_key names the column)")
    out: dict[str, Any] = {prompt_key: [dict(m) if isinstance(m, Mapping) else m for m in prompt]}
    source = row.get(source_key, DEFAULT_SOURCE if own_reward else None)
    if source is None:
        raise DataError(f"{where} has no {source_key!r}, which picks the built-in scorer; give it (e.g. "
                        "'arithmetic'), or pass reward= to score every row with your function")
    out[source_key] = source
    rm = row.get("reward_model") or {}
    if not isinstance(rm, Mapping):
        raise DataError(f"{where}: reward_model is a {type(rm).__name__}, not a dict; write "
                        "{'ground_truth': ...} or leave it out")
    truth = _ground_truth(row, own_reward)
    if truth is not None:
        out["reward_model"] = {**rm, "ground_truth": truth}
    if "ability" in row:
        out["ability"] = row["ability"]
    info = row.get("extra_info") or {}
    if not isinstance(info, Mapping):
        raise DataError(f"{where}: extra_info is a {type(info).__name__}, not a dict; write a dict or leave it out")
    info = dict(info)
    for key in row.keys() - {prompt_key, source_key, *VERL_COLUMNS}:
        if key in info:
            raise DataError(f"{where}: {key!r} is both a column and a key of extra_info; rename one")
        info[key] = row[key]
    if info:
        out["extra_info"] = info
    return out


def _ground_truth(row: dict, optional: bool) -> Optional[str]:
    rm = row.get("reward_model")
    truth = rm.get("ground_truth") if isinstance(rm, Mapping) else None
    truth = row.get("ground_truth") if truth is None else truth
    if truth is None:
        return "" if optional else None  # None: the dataset's row check names the missing ground truth
    return truth if isinstance(truth, str) else json.dumps(truth) if isinstance(truth, (list, dict)) else str(truth)


def write_split(data: PromptData, folder: str, split: str, prompt_key: str = "prompt", source_key: str = "data_source",
                own_reward: bool = False) -> Written:
    """`data` as <folder>/<split>-<content hash>.parquet (the same rows: the same file, so a resumed run's
    config is unchanged; other rows: another file, which resume reports as a changed data.<split>_files).
    Written atomically. A path is used as is."""
    what = f"{split} data"
    if isinstance(data, (str, os.PathLike)):
        return Written(os.fspath(data), text_prompts=False)
    raw = to_rows(data, what)
    if not raw:
        raise DataError(f"{what}: no rows; give at least one")
    rows = [verl_row(r, i, what, prompt_key, source_key, own_reward) for i, r in enumerate(raw)]
    text = all(isinstance(r.get(prompt_key), str) for r in raw)
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = os.path.join(folder, f"{split}-{digest}.parquet")
    if not os.path.isfile(path):
        _write_atomically(_table(rows, what), path)
    return Written(path, text_prompts=text)


def _table(rows: list[dict], what: str) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise DataError(f"{what}: cannot store the rows as parquet ({str(e).splitlines()[0]}); give each column "
                        "values of one type in every row (e.g. all strings)") from None


def _write_atomically(table: pa.Table, path: str) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file there."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
