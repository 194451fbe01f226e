"""The tool config file (`actor_rollout_ref.rollout.multi_turn.tool_config_path`, layout in tools/base.py)
into Tool objects: a class_name is a built-in (registered in TOOLS by the imports below), `pkg.module.Class`
or `path/to/file.py:Class`. Above base.py and the built-ins, so neither imports the other's caller."""

from __future__ import annotations

import importlib
from pathlib import Path

from hybridrl.errors import ConfigError
from hybridrl.rollout.tools import calculator, sandbox  # noqa: F401  (importing them registers the built-ins)
from hybridrl.rollout.tools.base import TOOLS, Tool
from hybridrl.user_code import failure, import_file


def _resolve_class(class_name: str) -> type:
    """A built-in tool name, `pkg.module.Class`, or `path/to/file.py:Class`."""
    if class_name in TOOLS:
        return TOOLS.get(class_name)
    what = f"tool class_name {class_name!r}"
    if ":" in class_name:
        path, attr = class_name.rsplit(":", 1)
        if not Path(path).is_file():
            raise ConfigError(f"{what}: no file {path}")
        module = import_file(path, f"hybridrl_tool_{abs(hash(path))}", what)
    elif "." in class_name:
        path, attr = class_name.rsplit(".", 1)
        try:
            module = importlib.import_module(path)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # not installed, or its import fails (a sys.exit too)
            raise ConfigError(f"{what} failed to import: {failure(e)}") from None
    else:
        TOOLS.entry(class_name)  # raises, listing the built-in names
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Tool)):
        found = "no" if cls is None else f"a {type(cls).__name__}, not a Tool subclass, as"
        raise ConfigError(f"{what}: {path} has {found} {attr}")
    return cls


def load_tools(path: str) -> dict[str, Tool]:
    """The tools of a tool config file, by function name."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from hybridrl.config.yaml_load import load_file

    if not Path(path).is_file():
        raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={path!r}: no such file")
    loaded = load_file(path, path)  # YAML, UTF-8 and read errors in one line, as for --config
    try:
        spec = OmegaConf.to_container(OmegaConf.create(loaded), resolve=True) if isinstance(loaded, dict) else None
    except OmegaConfBaseException as e:  # e.g. a ${...} that cannot be resolved
        raise ConfigError(f"{path}: {str(e.msg).splitlines()[0]}") from None
    entries = spec.get("tools") if isinstance(spec, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty `tools:` list (each with class_name, optional config, "
                          "tool_schema)")
    tools: dict[str, Tool] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ConfigError(f"{path}: tools[{i}] needs a class_name")
        cls = _resolve_class(str(entry["class_name"]))
        if not isinstance(entry.get("config") or {}, dict):
            raise ConfigError(f"{path}: tools[{i}] ({entry['class_name']}): config must be a mapping of keyword "
                              "arguments")
        try:
            tool = cls(tool_schema=entry.get("tool_schema"), **(entry.get("config") or {}))
        except TypeError as e:  # a config key the class does not take
            raise ConfigError(f"{path}: tools[{i}] ({entry['class_name']}): bad config ({e})") from None
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # the user's constructor failed (or called sys.exit)
            raise ConfigError(f"{path}: tools[{i}] ({entry['class_name']}) could not be built: {failure(e)}") from None
        if not isinstance(tool.schema, dict) or not isinstance(tool.schema.get("function"), dict) \
                or not tool.schema["function"].get("name"):
            raise ConfigError(f"{path}: tools[{i}] ({entry['class_name']}) has no tool_schema.function.name")
        if tool.name in tools:
            raise ConfigError(f"{path}: two tools are called {tool.name!r}")
        tools[tool.name] = tool
    return tools
