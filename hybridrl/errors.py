"""User-facing errors: the CLI prints their message as one line, without a traceback.

Raise these for anything the user can fix (a config value, a file, a data row); the
message says what is wrong, where, and how to fix it. Bugs stay ordinary exceptions.
"""


class HybridRLError(Exception):
    """An error the user can fix; its message is the whole story."""


class ConfigError(HybridRLError):
    """A config key or value is invalid or inconsistent with another."""


class DataError(HybridRLError):
    """A dataset file or row cannot be used."""
