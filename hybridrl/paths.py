"""Output paths checked before the work that fills them: a command that would fail to write its result
says so in one line at once, not after an evaluation or a training run (and never as a traceback).

The checks create nothing the command would not: a probe file is written and removed in the nearest
folder that exists, so a folder that the command itself will create later is not made here.
"""

from __future__ import annotations

import os
import tempfile

from hybridrl.errors import ConfigError, setting


def _nearest_existing(path: str) -> str:
    """`path` or its closest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _probe(folder: str, what: str) -> None:
    """Write and remove a file in `folder`; a ConfigError naming `what` (flag and path) if that fails."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".hybridrl-write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"{what}: cannot write in {folder} ({e.strerror or e}); give a path you can write to") from None


def _check_parent(path: str, what: str) -> None:
    existing = _nearest_existing(os.path.dirname(os.path.abspath(path)) or ".")
    if not os.path.isdir(existing):
        raise ConfigError(f"{what}: {existing} is a file, not a folder; give a path you can write to")
    _probe(existing, what)


def check_output_file(path: str, name: str) -> None:
    """The file `path` (given with `name`: a flag, a positional's name or a config key) can be written:
    not a folder, and its folder (or the closest one that exists, where the command will create the
    rest) takes new files; an existing file is opened for appending (not truncated) to see that it can
    be replaced."""
    what = setting(name, path)
    if not path:
        raise ConfigError(f"{name}: give a file path (got an empty one)")
    if os.path.isdir(path):
        raise ConfigError(f"{what}: is a folder; give a file path")
    _check_parent(path, what)
    if os.path.exists(path):
        try:
            with open(path, "ab"):
                pass
        except OSError as e:
            raise ConfigError(f"{what}: cannot overwrite it ({e.strerror or e}); give a path you can write to") from None


def check_output_folder(path: str, name: str, shown: str | None = None) -> None:
    """The folder `path` (given with `name`: a flag, a positional's name or a config key) can be written:
    it is a folder or does not exist yet, and files can be created in it (or in the closest folder that
    exists, where it will be made). `shown`: how the errors name the setting, where `name=value` is not it
    (a key of a sweep file)."""
    what = shown or setting(name, path)
    if not path:
        raise ConfigError(f"{name}: give a folder path (got an empty one)")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{what}: is a file, not a folder; give a folder path")
    if os.path.isdir(path):
        _probe(path, what)
    else:
        _check_parent(path, what)
