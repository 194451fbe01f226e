"""Where hybridrl's default differs from verl's for a key that changes what is trained.

hybridrl's defaults are those of its bundled task (tiny-arith, GRPO, a laptop CPU); verl's are those of its
trainer config (verl/trainer/config/_generated_ppo_trainer.yaml, commit b178a3c, January 2026). A verl command
that leaves one of these keys unset relies on verl's value and would silently get hybridrl's: `hybridrl check`
lists each such key (plan/inert_keys.py lists the opposite: keys set but not read). Paths, names, the device,
and memory or speed levers (gradient checkpointing, padding removal, strategy, engine options) are left out:
they change where and how fast, not what is learned.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Optional

VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "actor_rollout_ref.rollout.n": 1,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.warmup_style": "constant",
    "data.train_batch_size": 1024,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "trainer.total_epochs": 30,
    "trainer.test_freq": -1,
}


@dataclass(frozen=True)
class DefaultGap:
    key: str
    ours: Any
    verl: Any

    def line(self) -> str:
        return f"{self.key} is not set: hybridrl's default {self.ours!r} applies, verl's is {self.verl!r}"


def unset_keys_with_other_defaults(cfg: Any, given: Iterable[str]) -> list[DefaultGap]:
    """The keys of VERL_DEFAULTS that `given` (the dotted keys the user set) leaves unset and whose value in
    `cfg` (an RLConfig; then hybridrl's default) is not verl's."""
    given = set(given)
    out = []
    for key, verl in VERL_DEFAULTS.items():
        ours = functools.reduce(getattr, key.split("."), cfg)
        if key not in given and ours != verl:
            out.append(DefaultGap(key, ours, verl))
    return out


def given_keys(overrides: Iterable[str], config_file: Optional[str] = None) -> set[str]:
    """The dotted keys a command line (key=value, Hydra's +/++ forms) and a YAML file set."""
    keys = {item.split("=", 1)[0].lstrip("+~") for item in overrides if "=" in item}
    if config_file:
        from omegaconf import OmegaConf

        def leaves(node, prefix: str):
            if isinstance(node, dict):
                for k, v in node.items():
                    yield from leaves(v, f"{prefix}{k}.")
            else:
                yield prefix[:-1]

        keys |= set(leaves(OmegaConf.to_container(OmegaConf.load(config_file), resolve=False), ""))
    return keys
