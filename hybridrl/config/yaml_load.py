"""User YAML (--config files, sweep files) read the way the people who write it expect numbers to read.

PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent: `lr: 1e-5` and `1.0e5` load as the
strings '1e-5' and '1.0e5'. A schema-typed config key converts them back, but a sweep's `loguniform: [1e-5, 1e-3]`
or any untyped value kept them as text ("give two numbers"). YAML 1.2, OmegaConf's own loader and JSON all read
them as numbers; so does this loader. Everything else is PyYAML's safe loader unchanged.
"""

from __future__ import annotations

import re
from typing import IO, Any, Union

import yaml

# a number with an exponent, with or without a dot or the exponent's sign (YAML 1.2 core schema floats)
EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class NumberLoader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads `1e-5`-style scalars as floats."""


NumberLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))


def safe_load(stream: Union[str, IO[str]]) -> Any:
    return yaml.load(stream, Loader=NumberLoader)  # noqa: S506  (a SafeLoader subclass)
