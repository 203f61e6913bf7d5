"""Building this library's pydantic models without running validation, when it would
keep every value as given.

Validating a model costs more than building it; on the encode path every value is
already checked (or computed from checked values), so the objects are built directly:
the same fields, field order and fields set as validation builds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

_M = TypeVar("_M", bound=BaseModel)
_set_attr = object.__setattr__


@functools.cache
def _field_defaults(
    cls: type[BaseModel],
) -> tuple[dict[str, Any], tuple[tuple[str, Callable[..., Any]], ...]]:
    """Every field of ``cls`` in order with its default (None for a required one or
    one with a factory), and the ``(name, factory)`` of the fields with a factory
    (factories without arguments: those of the library's models).

    A default is shared by every instance :func:`unvalidated` builds: the models
    of this library have immutable defaults (lists and dicts come from factories)."""
    template = {
        name: None if field.is_required() or field.default_factory else field.default
        for name, field in cls.model_fields.items()
    }
    factories = tuple(
        (name, field.default_factory)
        for name, field in cls.model_fields.items()
        if field.default_factory is not None
    )
    return template, factories


@functools.cache
def _fields_set(cls: type[BaseModel], names: tuple[str, ...]) -> set[str]:
    """One fields set per model and set of names, shared by the instances built by
    :func:`unvalidated` (as the store's rebuilt models share theirs: pydantic copies
    a fields set before changing it, e.g. in ``model_copy``, and these models are
    frozen)."""
    return set(names)


def unvalidated(cls: type[_M], fields: dict[str, Any]) -> _M:
    """``cls(**fields)`` when validation would keep every value of ``fields`` as it
    is (values already valid, sub-models exactly of their declared class), built
    without running it.

    The instance holds ``fields``, the other fields' defaults (factories called) in
    the model's field order, and ``fields``' names as its fields set: what validation
    builds (the set is shared: one object fewer for the garbage collector to track
    per instance). Only for the models of this library (no extra fields, no private
    attributes, frozen).

    Args:
        cls: the model class.
        fields: field name -> valid value, for some of its fields (every required
            one included).

    Returns:
        The instance.
    """
    template, factories = _field_defaults(cls)
    values = {**template, **fields}
    for name, factory in factories:
        if name not in fields:
            values[name] = factory()
    out = object.__new__(cls)
    _set_attr(out, "__dict__", values)
    _set_attr(out, "__pydantic_fields_set__", _fields_set(cls, tuple(fields)))
    _set_attr(out, "__pydantic_extra__", None)
    _set_attr(out, "__pydantic_private__", None)
    return out
