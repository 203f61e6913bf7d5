"""Local float64 evaluation of kernel functions for the public, per-object API.

The public helpers (``retrieval_breakdown``, ``adaptive_weights``, ...) promise
float64-exact values like the original library. They run the very same kernel
functions inside JAX's *local* x64 context; the global flag is never touched.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import jax


def float64() -> AbstractContextManager[Any]:
    """Context in which JAX creates and computes float64 arrays (thread-local).

    Returns:
        JAX's own ``enable_x64(True)`` context (entered on every retrieve: no
        generator wrapper around it).
    """
    return jax.enable_x64(True)
