"""The scorer registry, a leaf module: each scorer module registers into it, and the package's
__init__ imports those modules (so `SCORERS` is full once `hybridrl.rewards.scorers` is imported)."""

from __future__ import annotations

from typing import Any, Callable

from hybridrl.registry import Registry

Scorer = Callable[..., Any]
SCORERS: Registry[Scorer] = Registry("reward scorer", "data_source")
