"""The `data` check: the train and val files read as the run reads them (hybridrl/data/dataset.py), and what
the run would do to them: rows refused, prompts the chat template cannot render, prompts cut or dropped by
data.max_prompt_length, reference solutions longer than data.max_response_length, prompts shared by the
train and val files, and data_sources no scorer handles.

The rows are those the run uses: the first data.{train,val}_max_samples good rows of the files, in order.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from hybridrl.check.context import CheckContext
from hybridrl.check.registry import check
from hybridrl.check.result import Result, combine, failed, not_applicable, passed
from hybridrl.errors import HybridRLError

TOKENIZE_CAP = 20_000  # prompts tokenized per split: GSM8K's 7.5k take about a second with a fast tokenizer
FEW = 0.02  # a larger share of prompts cut or dropped by data.max_prompt_length is a ✗
KEEP = 0.99  # the share of prompts (or reference solutions) the suggested length keeps whole
REFERENCE_OVER = 0.10  # a larger share of reference solutions over data.max_response_length is a ✗
REFERENCE_KEYS = ("answer", "solution")  # extra_info keys of a worked solution (verl's GSM8K preprocessing: answer)
EXAMPLE_CHARS = 80


@dataclass
class SplitRows:
    """The rows of one split that the run would use, and the ones it would refuse."""

    key: str  # the config key of the files: data.train_files | data.val_files
    rows: list[tuple[int, dict]] = field(default_factory=list)  # (row index across the split's files, row)
    bad: list[str] = field(default_factory=list)  # "row <i>: <problem and fix>" of each refused row
    total: int = 0  # rows read (good and bad) before the max_samples cut
    error: Optional[str] = None  # the files could not be read at all


def run_rows(ctx: CheckContext, split: str) -> SplitRows:
    """The good rows of `split` the run takes (its first data.<split>_max_samples), as RLDataset picks them."""
    from hybridrl.config.validate import needs_ground_truth
    from hybridrl.data.dataset import row_problem

    d = ctx.cfg.data
    out = SplitRows(f"data.{split}_files")
    try:
        rows = ctx.rows(split)
    except HybridRLError as e:  # a file missing, unreadable, empty
        out.error = str(e).splitlines()[0]
        return out
    limit = d.train_max_samples if split == "train" else d.val_max_samples
    for i, row in enumerate(rows):
        if 0 <= limit <= len(out.rows):
            break
        problem = row_problem(row, d.prompt_key, d.reward_fn_key, needs_ground_truth(ctx.cfg))
        if problem is None:
            out.rows.append((i, row))
        else:
            out.bad.append(f"row {i}: {problem}")
    out.total = len(rows)
    return out


def reference_solution(row: dict) -> Optional[str]:
    """The row's worked solution (extra_info.answer as verl's GSM8K preprocessing keeps it), None without one."""
    info = row.get("extra_info")
    if not isinstance(info, dict):
        return None
    for key in REFERENCE_KEYS:
        if isinstance(info.get(key), str) and info[key].strip():
            return info[key]
    return None


def spread(items: list, count: int) -> list:
    """`count` items evenly spread over the list (all when it has no more): a deterministic sample."""
    if len(items) <= count:
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def kept_length(lengths: list[int], share: float = KEEP) -> int:
    """The smallest length that keeps `share` of `lengths` whole (their `share` quantile, rounded up)."""
    ordered = sorted(lengths)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _pct(k: int, n: int) -> str:
    return f"{k} of {n} ({100 * k / max(n, 1):.1f}%)"


# ---- rows parse -----------------------------------------------------------------------------------------
def _parse(s: SplitRows, skip_bad_rows: bool) -> Result:
    if s.error:
        return failed(f"{s.key} cannot be read: {s.error}", fix=f"give {s.key} readable .parquet or .jsonl files")
    if not s.bad:
        return passed(f"{s.key}: {len(s.rows)} rows parse")
    first = f"first: {s.bad[0][:200]}"
    if not skip_bad_rows:
        return failed(f"{s.key}: {len(s.bad)} malformed rows; the run stops at the first", first,
                      fix="fix the rows, or set data.skip_bad_rows=true to skip them (counted)")
    share = len(s.bad) / max(s.total, 1)
    if share > FEW:
        return failed(f"{s.key}: {_pct(len(s.bad), s.total)} rows are malformed and would be skipped", first,
                      fix="fix the rows (data.skip_bad_rows=true hides that much of the data)")
    return passed(f"{s.key}: {len(s.rows)} rows parse; {len(s.bad)} malformed skipped (data.skip_bad_rows)", first)


# ---- the chat template renders, prompt lengths -------------------------------------------------------------
def _encode(tokenizer, conversations: list[list[dict]]) -> tuple[list[Optional[list[int]]], list[tuple[int, str]]]:
    """Each conversation's prompt ids as the dataset makes them (None where rendering fails), and the failures
    (position, error). One batched call; one by one only when it raises, to name the rows."""
    from hybridrl.data.dataset import encode_prompts

    try:
        return list(encode_prompts(tokenizer, conversations)), []
    except Exception:  # a template error (jinja, unsupported role): find which rows
        pass
    ids: list[Optional[list[int]]] = []
    errors = []
    for j, c in enumerate(conversations):
        try:
            ids.append(encode_prompts(tokenizer, [c])[0])
        except Exception as e:  # jinja2 TemplateError, ValueError (no chat template), ...
            ids.append(None)
            errors.append((j, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"))
    return ids, errors


def _dropped_text(tokenizer, conversation: list[dict]) -> Optional[str]:
    """The first message whose text the rendered prompt does not contain (a template that drops a message)."""
    rendered = " ".join(tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False).split())
    for j, m in enumerate(conversation):
        if " ".join(m["content"].split()) not in rendered:
            return f"message {j} ({m['role']})"
    return None


def _template(s: SplitRows, tokenizer, sample: list[tuple[int, dict]], prompt_key: str,
              ids: list[Optional[list[int]]], errors: list[tuple[int, str]]) -> Result:
    if errors:
        return failed(f"{s.key}: the chat template fails on {_pct(len(errors), len(sample))} prompts",
                      f"first: row {sample[errors[0][0]][0]}: {errors[0][1]}",
                      fix="fix the rows' messages, or the model's chat template (tokenizer_config.json chat_template)")
    # the text of every message must reach the model: checked on an even sample of the prompts
    for (i, row), prompt_ids in spread(list(zip(sample, ids)), 64):
        lost = _dropped_text(tokenizer, row[prompt_key])
        if lost:
            return failed(f"{s.key} row {i}: the chat template drops the text of {lost}",
                          f"rendered: {tokenizer.decode(prompt_ids)[:200]!r}",
                          fix="use a chat template that renders every message (tokenizer_config.json chat_template)")
    return passed(f"{s.key}: the chat template renders every prompt")


def _lengths(s: SplitRows, lengths: list[tuple[int, int]], sampled: str, cfg) -> Result:
    """`lengths`: (row, prompt tokens). What data.max_prompt_length does to them under the run's settings."""
    d = cfg.data
    limit, n = d.max_prompt_length, len(lengths)
    over = [(i, k) for i, k in lengths if k > limit]
    longest, keep = max(k for _, k in lengths), kept_length([k for _, k in lengths])
    facts = f"longest prompt {longest} tokens, {int(KEEP * 100)}% within {keep}{sampled}"
    if not over:
        return passed(f"{s.key}: every prompt fits data.max_prompt_length={limit}", facts)
    first = f"first: row {over[0][0]}, {over[0][1]} tokens"
    if d.filter_overlong_prompts:  # RLDataset drops before it would truncate
        verb = "dropped (data.filter_overlong_prompts)"
    elif d.truncation == "error":
        return failed(f"{s.key}: {_pct(len(over), n)} prompts are over data.max_prompt_length={limit}: "
                      "data.truncation=error stops the run at the first", facts, first,
                      fix=f"set data.max_prompt_length={longest} (keeps all), or data.filter_overlong_prompts=true "
                          f"(drops {len(over)}; data.max_prompt_length={keep} keeps {int(KEEP * 100)}%)")
    else:
        verb = f"cut (data.truncation={d.truncation})"
    if len(over) / n > FEW:
        return failed(f"{s.key}: {_pct(len(over), n)} prompts over data.max_prompt_length={limit} are {verb}",
                      facts, first, fix=f"set data.max_prompt_length={keep} (keeps {int(KEEP * 100)}% whole)")
    return passed(f"{s.key}: {_pct(len(over), n)} prompts over data.max_prompt_length={limit} are {verb}", facts)


def _prompts(s: SplitRows, tokenizer, cfg) -> list[Result]:
    """The template and length parts of one split (a deterministic sample past TOKENIZE_CAP rows)."""
    sample = spread(s.rows, TOKENIZE_CAP)
    sampled = f" (a sample of {len(sample)} of {len(s.rows)} prompts)" if len(sample) < len(s.rows) else ""
    ids, errors = _encode(tokenizer, [row[cfg.data.prompt_key] for _, row in sample])
    parts = [_template(s, tokenizer, sample, cfg.data.prompt_key, ids, errors)]
    lengths = [(i, len(p)) for (i, _), p in zip(sample, ids) if p is not None]
    if lengths:
        parts.append(_lengths(s, lengths, sampled, cfg))
    return parts


# ---- the response budget against the reference solutions -------------------------------------------------
def _budget(s: SplitRows, tokenizer, max_response_length: int) -> Result:
    refs = [(i, r) for i, r in ((i, reference_solution(row)) for i, row in spread(s.rows, TOKENIZE_CAP)) if r]
    if not refs:
        return not_applicable(f"{s.key}: no row carries a reference solution (extra_info.answer) to measure "
                              "data.max_response_length against")
    # + 1: the model ends its response with the end-of-sequence token, inside the same budget
    lengths = [len(ids) + 1 for ids in tokenizer([r for _, r in refs], add_special_tokens=False)["input_ids"]]
    over = sum(k > max_response_length for k in lengths)
    facts = (f"reference solutions: median {sorted(lengths)[len(lengths) // 2]} tokens, longest {max(lengths)}, "
             f"{int(KEEP * 100)}% within {kept_length(lengths)} (of {len(lengths)} rows)")
    if over / len(lengths) > REFERENCE_OVER:
        return failed(f"{_pct(over, len(lengths))} reference solutions are longer than data.max_response_length="
                      f"{max_response_length} tokens: responses as long as the data's own are cut", facts,
                      fix=f"set data.max_response_length={kept_length(lengths)} (fits {int(KEEP * 100)}% of them)")
    return passed(f"data.max_response_length={max_response_length} fits {_pct(len(lengths) - over, len(lengths))} "
                  "reference solutions", facts)


# ---- train/val leakage ----------------------------------------------------------------------------------
def prompt_text(messages: list[dict]) -> str:
    """A prompt's identity: its messages' roles and whitespace-normalised text."""
    return json.dumps([[m["role"], " ".join(m["content"].split())] for m in messages], ensure_ascii=False)


def _leakage(train: SplitRows, val: SplitRows, prompt_key: str) -> Result:
    if val.error or not val.rows:
        return not_applicable("no validation rows to compare with the training rows")
    seen = {prompt_text(row[prompt_key]): i for i, row in train.rows}
    shared = [(seen[t], j, row) for j, row in val.rows if (t := prompt_text(row[prompt_key])) in seen]
    if not shared:
        return passed(f"no prompt of data.val_files ({len(val.rows)}) is in data.train_files ({len(train.rows)})")
    i, j, row = shared[0]
    text = " ".join(row[prompt_key][-1]["content"].split())[:EXAMPLE_CHARS]
    return failed(f"{_pct(len(shared), len(val.rows))} validation prompts are also training prompts (leakage)",
                  f"first: data.val_files row {j} = data.train_files row {i}: {text!r}",
                  fix=f"remove the {len(shared)} shared prompts from data.val_files (or from data.train_files)")


# ---- every data_source has a scorer -----------------------------------------------------------------------
def _scorers(ctx: CheckContext, splits: list[SplitRows]) -> Result:
    from hybridrl.config.validate import needs_ground_truth
    from hybridrl.rewards.custom import load_function
    from hybridrl.rewards.scorers import SCORERS

    cfg = ctx.cfg
    if not needs_ground_truth(cfg):
        return not_applicable("a reward model alone scores (reward_model.rule_weight=0): no rule scorer is called")
    crf = cfg.custom_reward_function
    if crf.path:  # one user function scores every data_source
        try:
            load_function(crf.path, crf.name)
        except HybridRLError as e:
            return failed(str(e).splitlines()[0], fix="set custom_reward_function.path/.name to an existing function")
        return passed(f"custom_reward_function {crf.path}:{crf.name} scores every data_source")
    key = cfg.data.reward_fn_key
    sources = Counter((s.key, row[key]) for s in splits for _, row in s.rows)
    unknown = [(k, src, count) for (k, src), count in sources.items() if src not in SCORERS]
    if unknown:
        listed = [f"{src!r} ({count} rows of {k})" for k, src, count in unknown]
        return failed(f"{key} {', '.join(listed)}: no built-in scorer has that name",
                      fix="set custom_reward_function.path to a file with compute_score(data_source, solution_str, "
                          f"ground_truth, extra_info), or name a built-in scorer in the rows' {key}: "
                          f"{', '.join(SCORERS.names())}")
    names = sorted({src for _, src in sources})
    return passed(f"every {key} has a scorer: {', '.join(names)}")


@check("data")
def data_check(ctx: CheckContext) -> Result:
    """The train and val rows parse as the run reads them, the chat template renders every prompt, few prompts
    are cut or dropped by data.max_prompt_length, data.max_response_length fits the reference solutions,
    no validation prompt is a training prompt, and every data_source has a scorer.

    Prompts are tokenized with the model's own tokenizer (up to 20,000 per split, else an even sample)."""
    cfg = ctx.cfg
    train, val = run_rows(ctx, "train"), run_rows(ctx, "val")
    splits = [s for s in (train, val) if s.error or s.rows or s.bad]
    parts = [_parse(s, cfg.data.skip_bad_rows) for s in splits]
    for s in splits:
        if s.rows:
            parts += _prompts(s, ctx.tokenizer, cfg)
    if train.rows:
        parts.append(_budget(train, ctx.tokenizer, cfg.data.max_response_length))
    parts += [_leakage(train, val, cfg.data.prompt_key), _scorers(ctx, [train, val])]
    n_val = f", {len(val.rows)} val" if val.rows else ""
    return combine(parts, f"{len(train.rows)} train{n_val} rows parse, render and fit; no leakage; every "
                          "data_source has a scorer")
