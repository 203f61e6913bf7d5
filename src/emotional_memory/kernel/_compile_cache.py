"""JAX's persistent compilation cache, on by default for the library's programs.

A new process then loads the compiled retrieval programs from disk instead of
compiling them again (first retrieve: a cache read instead of 0.3-1.5 s of XLA).

- Directory: ``$EMOTIONAL_MEMORY_JAX_CACHE_DIR`` if set, else
  ``$XDG_CACHE_HOME/emotional_memory/jax``, else ``~/.cache/emotional_memory/jax``.
- Opt out: ``EMOTIONAL_MEMORY_JAX_CACHE=0`` (also ``false``/``no``/``off``).
- A user's own configuration wins: when ``jax_compilation_cache_dir`` is already set
  (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config.update``) or the cache is switched off
  (``jax_enable_compilation_cache`` False), nothing is changed.
- JAX caches only programs that took >= 1 s to compile by default, which the library's
  programs do not; when the threshold is still JAX's default, it is lowered to 0.1 s.
  JAX has no per-program threshold, so this applies to every program of the process
  (documented in ``docs/architecture.md``).

The settings must be in place before the process's first compile; the kernel applies
them when it is imported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax

ENV_DIR = "EMOTIONAL_MEMORY_JAX_CACHE_DIR"
ENV_SWITCH = "EMOTIONAL_MEMORY_JAX_CACHE"
MIN_COMPILE_SECONDS = 0.1
"""Compile-time threshold set in place of JAX's default of 1 s."""
_JAX_DEFAULT_MIN_COMPILE_SECONDS = 1.0


def _read(name: str) -> Any:
    """The current value of JAX config option ``name``."""
    return getattr(jax.config, name)


def default_cache_dir() -> Path:
    """The per-user cache directory (see the module docstring).

    Returns:
        The directory path (not created).
    """
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "emotional_memory" / "jax"


def enable_compile_cache() -> str | None:
    """Point JAX's persistent compilation cache at :func:`default_cache_dir`.

    Returns:
        The directory now in use (ours or the user's own), or None when the cache is
        off (opted out here or in JAX's own configuration).
    """
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in {"0", "false", "no", "off"}:
        return None
    if not _read("jax_enable_compilation_cache"):
        return None
    current = _read("jax_compilation_cache_dir")
    if current:
        return str(current)
    path = default_cache_dir()
    jax.config.update("jax_compilation_cache_dir", str(path))
    if _read("jax_persistent_cache_min_compile_time_secs") == _JAX_DEFAULT_MIN_COMPILE_SECONDS:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return str(path)
