"""Hydra's own keys in a config file: the `defaults:` list and the `hydra:` section.

verl's YAML files are Hydra configs: they start with a `defaults:` list that composes the file from
others (ppo_trainer.yaml, actor/dp_actor.yaml ...) and may hold a `hydra:` section for Hydra itself.
hybridrl reads one YAML file over its built-in defaults, so neither can work here, and neither looks
like any key of ours: without this answer the loader could only say "no similar key exists". (The
`_target_` of a section is verl's table's: vocab/verl_key_table.py.)
"""

from __future__ import annotations

from typing import Any, Optional

from hybridrl.vocab.verl_keys import Verdict

DEFAULTS = "defaults"
SECTION = "hydra"  # read by the loader as one key holding the whole section, answered once
SELF = "_self_"  # a defaults entry for the file itself: composes nothing else
MAX_NAMED = 4  # files named in the answer; a verl defaults list holds about 20


def judge(dotted: str, value: Any) -> Optional[Verdict]:
    """Accept or refuse one of Hydra's own keys; None when `dotted` is not one."""
    if dotted == DEFAULTS:
        files = composed_files(value)
        return Verdict(True, "") if not files else Verdict(False, _defaults_refusal(files))
    if dotted == SECTION:
        return Verdict(False, _section_refusal(value))
    return None


def composed_files(value: Any) -> list[str]:
    """The files a defaults list pulls in, as paths under the config folder: `ppo_trainer` ->
    ppo_trainer.yaml, `{actor@actor_rollout_ref.actor: dp_actor}` -> actor/dp_actor.yaml; `_self_`, a
    null option and Hydra's own groups (hydra/job_logging) compose no keys of the run."""
    entries = value if isinstance(value, (list, tuple)) else [value]
    files = []
    for entry in entries:
        if isinstance(entry, dict):
            files += [f"{_group(g)}/{o}.yaml" for g, o in entry.items()
                      if o is not None and not _group(g).startswith(f"{SECTION}/")]
        elif entry is not None and str(entry) != SELF:
            files.append(f"{entry}.yaml")
    return files


def _group(key: str) -> str:
    """The config group of a defaults entry's key: `override actor@actor_rollout_ref.actor` -> actor."""
    return str(key).removeprefix("override ").strip().split("@", 1)[0]


def _defaults_refusal(files: list[str]) -> str:
    named = ", ".join(files[:MAX_NAMED]) + (f" and {len(files) - MAX_NAMED} more" if len(files) > MAX_NAMED else "")
    return (f"{DEFAULTS}: Hydra `defaults` lists are not supported: hybridrl's config is one YAML file over its "
            "built-in defaults, plus key=value overrides; remove the defaults list and copy the keys you need from "
            f"the files it names ({named}) into your --config file or overrides (`--help` lists every key)")


def _section_refusal(value: Any) -> str:
    keys = ", ".join(_dotted_leaves(SECTION, value))
    return (f"{keys}: the `{SECTION}:` section configures Hydra itself (output folder, logging, config search "
            "path), and hybridrl does not run under Hydra; remove it (a run writes to trainer.default_local_dir)")


def _dotted_leaves(prefix: str, value: Any) -> list[str]:
    if not isinstance(value, dict) or not value:
        return [prefix]
    return [leaf for k, v in value.items() for leaf in _dotted_leaves(f"{prefix}.{k}", v)]
