"""The field helper every config section is declared with (`doc`: default, help text, valid values) and
the valid values of the choice keys. A leaf module: the schema modules and the code that acts on a
key's values import from here, and it imports nothing of hybridrl."""

from __future__ import annotations

from dataclasses import field
from typing import Any, Optional


def doc(default: Any, text: str, *, ge: Any = None, gt: Any = None, le: Any = None, lt: Any = None,
        also: tuple = (), choices: Optional[tuple[str, ...]] = None, length: Optional[int] = None,
        hint: Optional[str] = None) -> Any:
    """A dataclass field with a default, a one-line help text and the key's valid values, which
    config/constraints.py checks for every command (all violations reported at once):
    `ge`/`gt`/`le`/`lt` bound a number (every element of a list of numbers), `also` lists values
    valid outside those bounds (e.g. -1 for "off"), `choices` the valid strings, `length` the size of
    a list; `hint` ends the error message (what the value means, a usual value). Floats must also be
    finite. null is always valid for an Optional key."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "length": length, "hint": hint}
    metadata = {"help": text, **{k: v for k, v in bounds.items() if v is not None}, **({"also": also} if also else {})}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


SEED_MAX = 2 ** 32 - 1  # seeds are mixed into int64 counters (rollout/keyed.py, data/sampler.py)

# valid values of the choice keys; the modules that act on them import them from here
TRUNCATION_MODES = ("error", "left", "right")
WARMUP_STYLES = ("constant", "cosine")
STRATEGIES = ("ddp", "fsdp2", "fsdp")  # fsdp: verl's name, sharded here with FSDP2
ROLLOUT_ENGINES = ("hf", "vllm")
ROLLOUT_DTYPES = ("float32", "bfloat16", "float16", "auto")  # float16: vllm only (plan/levers.py); auto: plan/precision_auto.py
FILTER_METRICS = ("acc", "score", "seq_reward")
ON_ERROR = ("raise", "zero")
AGENT_ON_ERROR = ("zero", "fail")  # an agent that raises: a masked-out row with reward 0, or the step fails
REWARD_MANAGERS = ("naive", "batch", "dapo")
RESUME_MODES = ("auto", "disable", "resume_path")
BACKENDS = ("auto", "local", "ray")
DEVICES = ("cpu", "cuda")
LEGACY_WORKER_IMPL = ("auto", "enable", "disable")
