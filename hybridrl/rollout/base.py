"""The rollout-engine role: prompts in, sampled response tokens and their log-probs out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.rollout.keyed import KeyedDraws, sample_ids_of


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    do_sample: bool = True  # False: greedy
    ignore_eos: bool = False  # True: every response runs to max_new_tokens (EOS is sampled like any token)


@dataclass
class Generation:
    response_ids: Tensor  # [N, T] right-padded with the pad id; T <= max_new_tokens (longest response)
    response_mask: Tensor  # [N, T] 1 on generated tokens, EOS included
    log_probs: Tensor  # [N, T] log-softmax(logits / temperature) at the chosen token; 0 on padding
    # multi-turn (rollout/multi_turn.py) only: [N, T] 1 on every response token, tool tokens included;
    # None: response_mask
    attention_mask: Optional[Tensor] = None
    stats: Optional[dict[str, Tensor]] = None  # multi-turn only: name -> [N] per-row counts (turns, tool calls)
    # partial rollouts only (rollout/partial.py): [N, T] long, the version of the weights that sampled each token,
    # -1 on padding; None otherwise
    versions: Optional[Tensor] = None


class RolloutEngine(ABC):
    """Token-in/token-out generation. Backends are sibling modules (hf.py, vllm.py)."""

    shares_weights = True  # samples with the trainer's module itself; False: load_weights after each update
    draws: KeyedDraws  # seed and call counters: with each response's id, all the randomness (rollout/keyed.py)

    def close(self) -> None:
        """Free what the engine holds outside this process (vLLM's engine process)."""

    @abstractmethod
    def generate(self, prompt_ids: Tensor, prompt_mask: Tensor, sampling: SamplingParams,
                 sample_ids: Tensor, stream: str = "train") -> Generation:
        """prompt_ids, prompt_mask: [N, P] left-padded; sample_ids [N] int64: each response's identity
        (rollout/keyed.py), which with the engine's seed and the stream's call count fixes its draws."""

    def skip(self, stream: str = "train") -> None:
        """Count a generate call this engine had no rows for (data parallelism: every rank's
        counters stay equal)."""
        self.draws.skip(stream)

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Take the trainer's latest weights (a no-op when the engine shares the module)."""

    def state_dict(self) -> dict:
        """The sampling state, so a resumed run samples what the uninterrupted one would."""
        return self.draws.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.draws.load_state_dict(state)


def generate_rollout(engine: RolloutEngine, prompts: PromptBatch, n: int, sampling: SamplingParams,
                     stream: str = "train", inbox=None, sample_ids: Optional[Tensor] = None) -> Rollout:
    """n responses per prompt; rows i*n .. i*n+n-1 answer prompt i and share uid i. `inbox`: partial rollouts
    (rollout/partial.py, the hf engine only: config/async_checks.py). `sample_ids` ([N*n] int64): the responses'
    identities when the caller fixes them (the agent proxy: agent (row, j) keeps the id the built-in rollout gives
    sample j of row, whatever else shares the call); default sample_ids_of(prompts.index, n)."""
    repeated = prompts.repeat_interleave(n)
    partial = {} if inbox is None else {"inbox": inbox}
    ids = sample_ids_of(prompts.index, n) if sample_ids is None else sample_ids
    out = engine.generate(repeated.input_ids, repeated.attention_mask, sampling, ids, stream, **partial)
    uid = torch.arange(len(prompts.index)).repeat_interleave(n)
    return Rollout(repeated, out.response_ids, out.response_mask, out.log_probs, uid, out.attention_mask, out.stats,
                   out.versions)
