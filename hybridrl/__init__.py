"""hybridrl: reinforcement-learning post-training for LLMs, from a laptop CPU to a cluster.

As a library (docs/python_api.md): `hybridrl.train(config, data=..., reward=..., callbacks=...)` returns a
`Run`; `hybridrl.evaluate(model, data)` and `hybridrl.load(path)`. The names load on first use, so that
`import hybridrl` stays cheap (no torch).
"""

from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it (imported by __getattr__ when the name is first used)
_EXPORTS = {
    "train": "hybridrl.api.train",
    "Run": "hybridrl.api.run",
    "evaluate": "hybridrl.api.evaluate",
    "load": "hybridrl.api.run",
    "Callback": "hybridrl.trainer.callbacks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hybridrl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
