"""User YAML (--config files, sweep files) read the way the people who write it expect numbers to read.

PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent: `lr: 1e-5` and `1.0e5` load as the
strings '1e-5' and '1.0e5'. A schema-typed config key converts them back, but a sweep's `loguniform: [1e-5, 1e-3]`
or any untyped value kept them as text ("give two numbers"). YAML 1.2, OmegaConf's own loader and JSON all read
them as numbers; so does this loader. Everything else is PyYAML's safe loader unchanged.
"""

from __future__ import annotations

import io
import os
import re
from typing import IO, Any, Union

import yaml

from hybridrl.errors import ConfigError

# a number with an exponent, with or without a dot or the exponent's sign (YAML 1.2 core schema floats)
EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class NumberLoader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads `1e-5`-style scalars as floats."""


NumberLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))


def safe_load(stream: Union[str, IO[str]]) -> Any:
    return yaml.load(stream, Loader=NumberLoader)  # noqa: S506  (a SafeLoader subclass)


def load_file(path: str, label: str, fix: str = "") -> Any:
    """The YAML file at `path`, or one ConfigError line starting with `label` that says what is wrong with it: a
    folder, a missing file (then `fix`, e.g. where such a file comes from), YAML that does not parse, bytes that are
    not UTF-8, a file that cannot be read. Used for every YAML a user hands hybridrl (--config, sweep files)."""
    if not os.path.isfile(path):
        what = "a folder, not a file" if os.path.isdir(path) else "no such file"
        raise ConfigError(f"{label}: {what}" + (f"; {fix}" if fix else ""))
    try:
        with open(path, "rb") as f:
            text = io.StringIO(f.read().decode("utf-8"))  # whole: the error's offset is the file's, not a chunk's
        text.name = path  # what a YAML error's position names
        return safe_load(text)
    except yaml.YAMLError as e:  # the parser's message spans lines; the CLI prints one
        raise ConfigError(f"{label}: not valid YAML ({' '.join(str(e).split())}); fix the file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{label}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                          "save the file as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{label}: cannot read it ({e.strerror or e})") from None
