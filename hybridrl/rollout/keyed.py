"""Counter-based sampling randomness: the uniform number that picks token t of a response is a
hash of (engine seed, generate call, the response's identity, t), not the next draw of a stream.

So a response's tokens do not depend on which other responses share its batch, how prompts
are cut into generation batches, or which data-parallel worker generates it: one process and N
workers sample the same responses (up to a float near-tie: the probabilities themselves move by
~1e-7 with the batch's composition, and a token flips only if its uniform lands that close to a
CDF boundary). Resuming needs only the call counters (one for training, one for validation).

The hash is SplitMix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number
generators"), on torch int64 tensors: multiplication wraps modulo 2^64, and logical right shifts
are arithmetic shifts masked to the low bits.
"""

from __future__ import annotations

import torch
from torch import Tensor

_MASK64 = (1 << 64) - 1


def _signed(c: int) -> int:
    """A 64-bit constant as the int64 torch stores."""
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLDEN, _M1, _M2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shr(x: Tensor, s: int) -> Tensor:
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x: Tensor) -> Tensor:
    """SplitMix64's output function of state x + golden gamma, element-wise on int64."""
    z = x + _GOLDEN
    z = (z ^ _shr(z, 30)) * _M1
    z = (z ^ _shr(z, 27)) * _M2
    return z ^ _shr(z, 31)


STREAMS = ("train", "val")  # separate call counters: validating more or less often never moves training samples


def response_keys(seed: int, stream: str, call: int, sample_ids: Tensor) -> Tensor:
    """[N] int64 keys of the responses `sample_ids` ([N] int64, unique within a call) in call `call`
    of `stream`."""
    base = splitmix64(torch.tensor([seed, STREAMS.index(stream), call], dtype=torch.int64))
    return splitmix64(splitmix64(splitmix64(base[0] ^ base[1]) ^ base[2] ^ sample_ids.to(torch.int64)))


def uniforms(keys: Tensor, t: int) -> Tensor:
    """[N] float64 uniforms in [0, 1) for token position t of each response: the top 53 bits of the hash."""
    z = splitmix64(keys ^ splitmix64(torch.full_like(keys, t)))
    return _shr(z, 11).double() * 2.0 ** -53


def sample_ids_of(index: list[int], n: int) -> Tensor:
    """Identity of sample j of the prompt at dataset row index[i], for rows i*n + j: (row << 20) | j.
    Prompts are unique within a generate call (the sampler never repeats a row within a batch)."""
    rows = torch.tensor(index, dtype=torch.int64).repeat_interleave(n)
    return (rows << 20) | torch.arange(n, dtype=torch.int64).repeat(len(index))


class KeyedDraws:
    """A rollout engine's whole sampling state: the seed and one call counter per stream. Each
    generate call takes the keys of its responses (and counts itself); a rank with no rows skips."""

    def __init__(self, seed: int):
        self.seed = seed
        self.calls = dict.fromkeys(STREAMS, 0)

    def next_keys(self, stream: str, sample_ids: Tensor) -> Tensor:
        keys = response_keys(self.seed, stream, self.calls[stream], sample_ids)
        self.calls[stream] += 1
        return keys

    def skip(self, stream: str) -> None:
        self.calls[stream] += 1

    def set_call(self, stream: str, call: int) -> None:
        """The next generate call of `stream` is number `call`: an async rollout worker generates the trainer's
        batch k as call k-1 of "train", whatever it generated before, so its samples are the synchronous run's."""
        self.calls[stream] = call

    def state_dict(self) -> dict:
        return {"seed": self.seed, "calls": dict(self.calls)}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.calls = state["seed"], dict(state["calls"])
