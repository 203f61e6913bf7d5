"""Optional extras: whether one is installed (without importing it) and how to install it.

The package is published as ``emotional-memory-jax``; code written for the original
library knows the extras by the original's distribution ``emotional-memory``, so
install hints name both.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["DISTRIBUTION", "ORIGINAL_DISTRIBUTION", "install_hint", "installed"]

#: This library's distribution name.
DISTRIBUTION = "emotional-memory-jax"
#: The original library's distribution name.
ORIGINAL_DISTRIBUTION = "emotional-memory"


def install_hint(extra: str) -> str:
    """The ``pip install`` advice for an extra, naming both distributions.

    Args:
        extra: the extra's name (``"qdrant"``, ``"langchain"``, ...).

    Returns:
        e.g. ``pip install 'emotional-memory-jax[qdrant]' (the original library's
        distribution: 'emotional-memory[qdrant]')``.
    """
    return (
        f"pip install '{DISTRIBUTION}[{extra}]' (the original library's distribution: "
        f"'{ORIGINAL_DISTRIBUTION}[{extra}]')"
    )


def installed(package: str) -> bool:
    """Whether a top-level package can be imported, found without importing it.

    A ``None`` entry in ``sys.modules`` (how tests block an import) counts as absent.

    Args:
        package: the top-level import name (``"qdrant_client"``).

    Returns:
        True when it is importable.
    """
    if package in sys.modules:
        return sys.modules[package] is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False
