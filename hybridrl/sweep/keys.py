"""The swept keys checked against the config schema by the loader `hybridrl train` uses, so that an unknown
key gets the same message (and the nearest valid key) as on the command line."""

from __future__ import annotations

from typing import Any, Optional

from hybridrl.config.schema import RLConfig
from hybridrl.sweep.space import Entry


def unknown_keys(config: Optional[str], overrides: list[str], values: dict[str, Any], entries: list[Entry]
                 ) -> list[str]:
    """The loader's own message for each swept key it refuses as a key (not for its probe value), prefixed with
    the key's place in the sweep file."""
    from hybridrl.config.loader import load_config_checked, valid_keys

    loaded = load_config_checked(RLConfig, config, overrides, {**values, **{e.key: e.probe() for e in entries}})
    fields = valid_keys(RLConfig)
    out = []
    for e in entries:
        if e.key in fields:  # a schema key: its value is each trial's business
            continue
        said = [m for m in loaded.errors if f"'{e.key}'" in m or f"{e.key}=" in m or f"{e.key}:" in m]
        if said or e.key in loaded.refused:
            out += [f"space.{e.key}: {m}" for m in said] or [f"space.{e.key}: not a config key (hybridrl train "
                                                             "--help lists them)"]
    return out
