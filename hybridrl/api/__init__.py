"""hybridrl as a Python library: train, evaluate and load from a notebook or a script (see docs/python_api.md).

The names are exported from `hybridrl` itself (hybridrl/__init__.py, lazily); this package holds their code.
"""
