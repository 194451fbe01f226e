"""Padding-free forwards (`model.use_remove_padding`): a micro-batch's real tokens packed into a few
rows, attention confined by a block mask, positions restarting per sequence.

A sequence is a prompt segment followed by its response segment. Packed rows hold segments back
to back; the [R, 1, L, L] boolean mask lets a prompt token see the earlier tokens of its own prompt,
and a response token its prompt and the earlier tokens of its own response, nothing else. Position
ids count from 0 at each prompt and continue through its response, as the padded path's
`position_ids_of` does, so every token sees exactly what it sees in a padded row: the same outputs
up to rounding, with no compute spent on padding.

With prompt sharing (`share_prompt_prefix`), a prompt segment is followed by several responses of
that prompt ("Prefix Grouper", Liu et al. 2025): each response attends to the one copy, so a
group's prompt runs once, in the same single forward (no KV cache, so it composes with activation
checkpointing).

Row length: `min_width` tokens (the caller passes about the model's width, see forward.Layout), or the
micro-batch's longest sequence if that is longer; units (a sequence, or a prompt with as many of its
responses as fit) are placed first-fit, longest first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.batch import Sequences


@dataclass
class Packed:
    input_ids: Tensor  # [R, L] packed token ids; after a row's last segment id 0, which nothing attends to
    position_ids: Tensor  # [R, L] position of each token within its own sequence
    attention_mask: Tensor  # [R, 1, L, L] bool: query i may attend to key j
    out_rows: Tensor  # [N, T] packed row of the output that predicts response token t of sequence n
    out_cols: Tensor  # [N, T] its column (0 where response token t is padding; masked by the caller)
    keep_cols: Tensor  # [K] sorted columns whose outputs are read (column 0 included); see out_keep

    @property
    def out_keep(self) -> Tensor:
        """[N, T] index of each needed output among keep_cols (for a model asked for those columns only)."""
        return torch.searchsorted(self.keep_cols, self.out_cols)

    def gather(self, outputs: Tensor, kept: bool = False) -> Tensor:
        """Per-response-token outputs [N, T, ...] from packed outputs [R, L, ...] (or [R, K, ...] when
        the model returned the keep_cols only)."""
        return outputs[self.out_rows, self.out_keep if kept else self.out_cols]


@dataclass
class _Unit:
    """A prompt and some of its responses, placed contiguously in one packed row."""

    prompt: list[int]  # the prompt's real token ids
    responses: list[tuple[int, list[int]]]  # (sequence index n, its real response token ids)

    def __len__(self) -> int:
        return len(self.prompt) + sum(len(r) for _, r in self.responses)


def _real_tokens(seqs: Sequences) -> tuple[list[list[int]], list[list[int]]]:
    """Each row's prompt tokens (left padding dropped) and response tokens (right padding dropped;
    tool tokens of multi-turn responses stay: they are attended to)."""
    T = seqs.response_mask.shape[1]
    P = seqs.input_ids.shape[1] - T
    ids, attn = seqs.input_ids.tolist(), seqs.attention_mask.tolist()
    prompts = [[t for t, a in zip(row[:P], m[:P]) if a] for row, m in zip(ids, attn)]
    responses = [row[P:P + sum(m[P:])] for row, m in zip(ids, attn)]
    return prompts, responses


def _units(prompts: list[list[int]], responses: list[list[int]], share_prompts: bool, width: int) -> list[_Unit]:
    """Sequences, or with sharing each prompt with as many of its responses (in order) as fit `width`."""
    if not share_prompts:
        return [_Unit(p, [(n, r)]) for n, (p, r) in enumerate(zip(prompts, responses))]
    by_prompt: dict[tuple, list[int]] = {}
    for n, p in enumerate(prompts):
        by_prompt.setdefault(tuple(p), []).append(n)
    units = []
    for p, rows in by_prompt.items():
        unit = _Unit(list(p), [])
        for n in rows:
            if unit.responses and len(unit) + len(responses[n]) > width:
                units.append(unit)
                unit = _Unit(list(p), [])
            unit.responses.append((n, responses[n]))
        units.append(unit)
    return units


def _first_fit(units: list[_Unit], width: int) -> list[list[_Unit]]:
    """Rows of units, longest unit first, each into the first row with room (first-fit decreasing)."""
    rows: list[list[_Unit]] = []
    room: list[int] = []
    for unit in sorted(units, key=lambda u: -len(u)):
        r = next((i for i, free in enumerate(room) if free >= len(unit)), None)
        if r is None:
            rows.append([])
            room.append(width)
            r = len(rows) - 1
        rows[r].append(unit)
        room[r] -= len(unit)
    return rows


def pack(seqs: Sequences, share_prompts: bool = False, min_width: int = 0) -> Packed:
    """Pack the rows of `seqs` (see the module doc); outputs read back with Packed.gather."""
    N, T = seqs.response_mask.shape
    prompts, responses = _real_tokens(seqs)
    width = max(min_width, max(len(p) + len(r) for p, r in zip(prompts, responses)))
    rows = _first_fit(_units(prompts, responses, share_prompts, width), width)
    L = max(sum(len(u) for u in row) for row in rows)
    ids = torch.zeros((len(rows), L), dtype=torch.long)
    pos = torch.zeros((len(rows), L), dtype=torch.long)
    mask = torch.zeros((len(rows), 1, L, L), dtype=torch.bool)
    out_rows = torch.zeros((N, T), dtype=torch.long)
    out_cols = torch.zeros((N, T), dtype=torch.long)
    real = torch.zeros((N, T), dtype=torch.bool)  # response positions holding a token (generated or tool)
    for r, row in enumerate(rows):
        at = 0
        for unit in row:
            lp = len(unit.prompt)
            ids[r, at:at + lp] = torch.tensor(unit.prompt)
            pos[r, at:at + lp] = torch.arange(lp)
            mask[r, 0, at:at + lp, at:at + lp] = torch.ones(lp, lp, dtype=torch.bool).tril()
            start = at + lp
            for n, resp in unit.responses:
                lr = len(resp)
                ids[r, start:start + lr] = torch.tensor(resp, dtype=torch.long)
                pos[r, start:start + lr] = torch.arange(lp, lp + lr)
                mask[r, 0, start:start + lr, at:at + lp] = True
                mask[r, 0, start:start + lr, start:start + lr] = torch.ones(lr, lr, dtype=torch.bool).tril()
                # the output at a segment's previous token predicts each response token: the prompt's
                # last token predicts the first, response token t-1 predicts token t
                out_rows[n, :lr] = r
                real[n, :lr] = True
                out_cols[n, :lr] = torch.cat([torch.tensor([at + lp - 1]), torch.arange(start, start + lr - 1)])
                start += lr
            at = start
        idle = torch.arange(at, L)  # padding after the last unit attends to itself only (no empty softmax row)
        mask[r, 0, idle, idle] = True
    # every column an output is read from; padding positions read column 0, which searchsorted maps to 0
    keep = torch.unique(torch.cat([out_cols[real], torch.zeros(1, dtype=torch.long)]))
    return Packed(ids, pos, mask, out_rows, out_cols, keep)
