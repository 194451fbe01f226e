"""Which rows go together: micro-batches of a fixed size or of at most a token budget, and
data-parallel shards balanced by tokens. Pure functions of per-row token counts; callers `select`
the rows.

Token budgets follow verl's `use_dynamic_bsz`: a row costs its real tokens (prompt + response,
padding excluded), a micro-batch holds at most `max_tokens` of them, and the micro-batches of a
pass are balanced (greedy longest-processing-time: each unit, longest first, goes to the lightest
bin; Graham 1969 bounds its makespan by 4/3 of the optimum). The loss is normalised by the whole
mini-batch (algos/reduce.py), so how rows are grouped never changes an update.

Rows of one prompt (a GRPO group) are kept together where the budget allows, so prompt-prefix
sharing (models/forward.py) still runs each prompt once per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class MicroBatching:
    """How one pass splits a worker's rows: `size` responses per micro-batch, or with `max_tokens` set,
    micro-batches of at most that many real (prompt + response) tokens."""

    size: int
    max_tokens: Optional[int] = None  # None: fixed-size micro-batches

    @property
    def dynamic(self) -> bool:
        return self.max_tokens is not None


def largest_divisor(total: int, cap: int) -> int:
    """The largest d <= cap that divides total (total, cap >= 1)."""
    return max(d for d in range(1, min(total, cap) + 1) if total % d == 0)


def groups_of(keys: Sequence) -> list[list[int]]:
    """Rows with equal keys (e.g. a prompt's id), each group in row order, groups by first row."""
    out: dict = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return list(out.values())


def _lpt(units: list[list[int]], lengths: Sequence[int], bins: int) -> list[list[int]]:
    """Greedy longest-processing-time partition of `units` (lists of rows) into `bins` lists of rows;
    ties broken by the first row, so the result depends on the token counts only."""
    cost = [sum(lengths[i] for i in u) for u in units]
    order = sorted(range(len(units)), key=lambda u: (-cost[u], units[u][0]))
    load, out = [0] * bins, [[] for _ in range(bins)]
    for u in order:
        b = min(range(bins), key=lambda j: (load[j], j))
        load[b] += cost[u]
        out[b].extend(units[u])
    return [sorted(b) for b in out]


def token_budget_bins(lengths: Sequence[int], max_tokens: int, groups: Optional[list[list[int]]] = None,
                      min_bins: int = 1) -> list[list[int]]:
    """Rows (indices into `lengths`) split into the fewest bins of at most `max_tokens` tokens each, at
    least `min_bins` (data-parallel ranks must run as many forwards as the busiest one), balanced.
    `groups` (lists of rows) are kept whole where they fit; a row longer than the budget is an error
    (the config check makes the budget at least one full sequence)."""
    n = len(lengths)
    if n == 0:
        return []
    if max(lengths) > max_tokens:
        raise ValueError(f"a row of {max(lengths)} tokens exceeds the token budget {max_tokens}")
    rows = [[i] for i in range(n)]
    units = rows if groups is None else [g for g in groups if sum(lengths[i] for i in g) <= max_tokens] + \
        [[i] for g in groups if sum(lengths[i] for i in g) > max_tokens for i in g]
    bins = max(min_bins, -(-sum(lengths) // max_tokens))
    while True:
        if bins > len(units):
            units = rows  # more micro-batches than groups: split the groups
        bins = min(bins, n)
        out = _lpt(units, lengths, bins)
        if all(sum(lengths[i] for i in b) <= max_tokens for b in out) or bins == n:
            return sorted(out, key=lambda b: b[0])
        bins += 1  # the greedy packing overflowed a bin: one more micro-batch


def micro_batch_rows(lengths: Sequence[int], batching: MicroBatching, groups: Optional[list[list[int]]] = None,
                     min_bins: int = 1) -> list[Tensor]:
    """The row indices ([k] long tensors) of each micro-batch of a pass over `len(lengths)` rows:
    consecutive chunks of `batching.size`, or token-budget bins when `batching.dynamic`."""
    n = len(lengths)
    if not batching.dynamic:
        return [torch.arange(i, min(i + batching.size, n)) for i in range(0, n, batching.size)]
    return [torch.tensor(b, dtype=torch.long) for b in token_budget_bins(lengths, batching.max_tokens, groups, min_bins)]


def shard_rows(n: int, world: int) -> list[Tensor]:
    """Rank r's rows of an n-row batch: consecutive, sizes differing by at most one (rank order = row order)."""
    sizes = [n // world + (1 if r < n % world else 0) for r in range(world)]
    starts = [sum(sizes[:r]) for r in range(world)]
    return [torch.arange(s, s + size) for s, size in zip(starts, sizes)]


def balanced_shards(lengths: Sequence[int], world: int, groups: Optional[list[list[int]]] = None) -> list[Tensor]:
    """`world` shards of the rows with sizes differing by at most one unit, balanced by tokens: units
    (groups if given and all of one size, else rows) longest first, each to the lightest shard that
    still has room. Rank r gets shard r; each shard's rows in ascending order."""
    n = len(lengths)
    units = groups if groups and len({len(g) for g in groups}) == 1 and len(groups) % world == 0 else \
        [[i] for i in range(n)]
    per = [len(units) // world + (1 if r < len(units) % world else 0) for r in range(world)]
    cost = [sum(lengths[i] for i in u) for u in units]
    order = sorted(range(len(units)), key=lambda u: (-cost[u], units[u][0]))
    load, count, out = [0] * world, [0] * world, [[] for _ in range(world)]
    for u in order:
        r = min((j for j in range(world) if count[j] < per[j]), key=lambda j: (load[j], j))
        load[r] += cost[u]
        count[r] += 1
        out[r].extend(units[u])
    return [torch.tensor(sorted(s), dtype=torch.long) for s in out]
