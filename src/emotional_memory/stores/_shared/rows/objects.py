"""Memory objects of the row engine: private copies, cheap clones, sizes."""

from __future__ import annotations

from typing import Any

import numpy as np

from emotional_memory.models import Memory
from emotional_memory.stores._shared.rows.precision import (
    from_bfloat16_bits,  # noqa: F401  (was defined here; tests import it from here)
    to_bfloat16_bits,  # noqa: F401  (same)
)

__all__ = ["clone", "copy_metadata", "deep_size", "private_copy", "readonly"]


def copy_metadata(value: Any) -> Any:
    """A copy of JSON-like data: dicts and lists (at any depth) are new, leaves shared.

    Leaves (str, numbers, None, and any other object) are immutable in JSON data, so
    sharing them aliases nothing the caller could change through a dict or list.
    """
    if isinstance(value, dict):
        return {k: copy_metadata(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_metadata(v) for v in value]
    return value


def private_copy(memory: Memory, own_embedding: list[float] | None = None) -> Memory:
    """``memory`` with its own embedding list, metadata and link list.

    Copies in, copies out: the store never keeps a caller's lists or dicts, and
    never hands its own out, so mutating one on either side changes nothing on the
    other.

    Args:
        memory: the memory.
        own_embedding: a list the store already owns equal to ``memory.embedding``
            (a tag-only update's stored list), shared instead of copied: copying 384
            floats touches every float object's reference count.
    """
    tag = memory.tag
    if own_embedding is not None:
        embedding: list[float] | None = own_embedding
    else:
        embedding = None if memory.embedding is None else list(memory.embedding)
    return clone(memory, {
        "embedding": embedding,
        "metadata": copy_metadata(memory.metadata) if memory.metadata else {},
        "tag": clone(tag, {"resonance_links": list(tag.resonance_links)}),
    })


_set_attr = object.__setattr__


def clone(model: Any, updates: dict[str, Any]) -> Any:
    """A shallow copy of a pydantic model with some fields replaced, unvalidated.

    What ``model_copy(update=...)`` does, without its overhead (this runs for every
    memory a store hands out).
    """
    out = object.__new__(type(model))
    values = model.__dict__.copy()
    values.update(updates)
    _set_attr(out, "__dict__", values)
    _set_attr(out, "__pydantic_fields_set__", model.__pydantic_fields_set__)
    _set_attr(out, "__pydantic_extra__", model.__pydantic_extra__)
    _set_attr(out, "__pydantic_private__", model.__pydantic_private__)
    return out


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes reachable from ``obj`` (``sys.getsizeof`` over containers, objects'
    ``__dict__`` and pydantic's per-instance slots), each object counted once.

    Args:
        obj: the root object.
        seen: ids already counted (shared across calls to count a graph once).

    Returns:
        The total in bytes.
    """
    import sys

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        size += sum(deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
        for extra in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            value = getattr(obj, extra, None)
            if value is not None:
                size += deep_size(value, seen)
    return size


def readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
