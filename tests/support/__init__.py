"""Helpers shared by the tests: oracles, helper stores, real servers and worker scripts.

Importable as ``support`` (``tests/`` is on ``sys.path``: see ``pythonpath`` in
``pyproject.toml``). Test modules import from here, never from each other.
"""
