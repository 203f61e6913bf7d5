"""Local float64 evaluation of kernel functions for the public, per-object API.

The public helpers (``retrieval_breakdown``, ``adaptive_weights``, ...) promise
float64-exact values like the original library. They run the very same kernel
functions inside JAX's *local* x64 context; the global flag is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import jax


@contextmanager
def float64() -> Iterator[None]:
    """Context in which JAX creates and computes float64 arrays (thread-local)."""
    with jax.enable_x64(True):
        yield
