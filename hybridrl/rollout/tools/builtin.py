"""Importing this module registers the built-in tools (calculator, python) in TOOLS."""

from hybridrl.rollout.tools import calculator, sandbox  # noqa: F401
