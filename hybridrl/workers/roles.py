"""The roles the driver calls, as interfaces: what `trainer/` may ask of a policy, a reference, a teacher, a
critic and a reward model, whichever backend hosts it (and of the Ray worker processes that host them).

Two implementations of each: the local class in this package (workers/policy.py ...), and with
`trainer.backend=ray` a group in distributed/group.py that shards the batch over the worker processes and
gathers (PolicyGroup ...). They satisfy these Protocols structurally (neither imports this module);
tests/unit/workers/test_roles.py holds every implementation to every method's signature, so the two
cannot drift apart again.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout, Sequences, TrainBatch
from hybridrl.models.flops import ModelShape
from hybridrl.rollout.base import SamplingParams
from hybridrl.workers.critic import CriticBatch


@runtime_checkable
class Checkpointed(Protocol):
    """A trained role's checkpoint: its weights as a HuggingFace folder, the rest (optimizer, scheduler, RNG)
    as a state dict; `saved_shapes` says what save_pretrained writes, for the resume check (trainer/resumable.py)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def save_pretrained(self, folder: str) -> None: ...

    def load_pretrained(self, folder: str) -> None: ...

    def saved_shapes(self) -> dict[str, tuple[int, ...]]: ...


@runtime_checkable
class PolicyRole(Checkpointed, Protocol):
    """The actor with its rollout engine."""

    def generate(self, prompts: PromptBatch, n: int, sampling: SamplingParams, stream: str = "train",
                 sample_ids: Optional[Tensor] = None) -> Rollout:
        """n responses per prompt with their log-probs; `stream` "val": validation's own sampling counter;
        `sample_ids`: the responses' identities when the caller fixes them (rollout/base.generate_rollout)."""
        ...

    def skip(self, stream: str = "train") -> None:
        """Count a generate call without generating (the sampling counters stay those of a run that made it)."""
        ...

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π of each response token under the current weights, 0 on padding."""
        ...

    def log_probs_and_entropy(self, seqs: Sequences) -> tuple[Tensor, Tensor]:
        """log_probs and, from the same forward, the per-token entropy: two [N, T] tensors."""
        ...

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """One PPO-style update (epochs x mini-batches); its actor/* metrics."""
        ...

    def engine_weights(self) -> object:
        """The current whole weights as an engine loads them (locally a dict of tensors; on Ray an object-store
        reference the async rollout pool reads)."""
        ...

    def model_shape(self) -> ModelShape: ...

    def close(self) -> None:
        """End what the role itself owns (the local vLLM engine's processes); a group's worker processes are
        RayRoles' to end (RLRun.close)."""
        ...


@runtime_checkable
class FrozenLogProbRole(Protocol):
    """A frozen model's log-probs of the policy's tokens: the reference (KL terms) and the distillation teacher."""

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log-probs of each response token, 0 on padding."""
        ...


ReferenceRole = FrozenLogProbRole
TeacherRole = FrozenLogProbRole


@runtime_checkable
class CriticRole(Checkpointed, Protocol):
    """The value model (GAE)."""

    def values(self, seqs: Sequences) -> Tensor:
        """[N, T] V(s_t) under the current weights, 0 on padding."""
        ...

    def update(self, batch: CriticBatch) -> dict[str, float]:
        """The clipped value-loss update; its critic/* metrics."""
        ...


@runtime_checkable
class RewardModelRole(Protocol):
    """A trained reward model (rewards/manager.py mixes its score with the rules')."""

    def scores(self, rollout: Rollout, texts: list[str]) -> Tensor:
        """[N] one scalar per response; `texts`: the decoded responses."""
        ...


@runtime_checkable
class WorkerProcesses(Protocol):
    """With trainer.backend=ray, the processes that host the roles (distributed/group.RayRoles)."""

    def timeline_events(self) -> list[dict]:
        """The spans every worker recorded since the last call (trainer.profile_timeline)."""
        ...

    def close(self) -> None:
        """End every worker process and its engines (and Ray, when the run started it)."""
        ...
