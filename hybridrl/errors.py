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


class ConfigErrors(ConfigError):
    """Several config problems of one command, reported together: one line each, numbered.

    With a single problem its message is that problem's alone, so one mistake reads as before."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        if len(self.messages) == 1:
            super().__init__(self.messages[0])
        else:
            lines = [f"{len(self.messages)} problems in the config:"]
            lines += [f"  {i}. {m}" for i, m in enumerate(self.messages, 1)]
            super().__init__("\n".join(lines))


def setting(name: str, value: object) -> str:
    """A setting as errors show it: `key='value'` for a config key, `--flag value` for a command's flag
    (or a positional argument's name, e.g. OUT)."""
    return f"{name}={value!r}" if "." in name and not name.startswith("-") else f"{name} {value}"


def messages_of(e: ConfigError) -> list[str]:
    """The one-line problems an error carries (several for ConfigErrors)."""
    return list(e.messages) if isinstance(e, ConfigErrors) else [str(e)]


def raise_all(messages: list[str]) -> None:
    """Raise ConfigErrors with `messages` (duplicates dropped, order kept); nothing when there are none."""
    unique = list(dict.fromkeys(messages))
    if unique:
        raise ConfigErrors(unique)
