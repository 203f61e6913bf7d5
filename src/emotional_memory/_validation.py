"""Small validation helpers shared by the value objects and configs (docs/behaviour.md §9).

Every helper raises ``ValueError`` whose message names the offending field, so a
user can tell at once which argument was wrong.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np


class FieldTypeError(TypeError, ValueError):
    """A field given a value of the wrong type, where the original's model raised
    pydantic's ``ValidationError``.

    A ``TypeError`` (what a plain argument of the wrong type raises) that is also a
    ``ValueError``, so code written for the original that catches ``ValueError`` keeps
    working; raised in a pydantic validator it becomes a ``ValidationError`` naming
    the field (docs/behaviour.md §11).
    """


class NumberTypeError(FieldTypeError):
    """A value that is not a number (or is a bool) where a number is wanted."""


def real_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether an array of ``dtype`` holds real numbers: numpy's integers and floats,
    or one of ml_dtypes' floats (``bfloat16``, ``float8_*``, what accelerator models
    answer in); not bool, complex, strings or objects.

    Args:
        dtype: the dtype.

    Returns:
        True for real numbers.
    """
    if np.issubdtype(dtype, np.number):
        return not np.issubdtype(dtype, np.complexfloating)
    if dtype.kind != "V":  # ml_dtypes' floats are numpy "void" kinds
        return False
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except ValueError:  # another structured or opaque type
        return False
    return True


def finite(field: str, value: float) -> float:
    """Return ``value`` as a float, raising ``ValueError`` naming ``field`` if NaN/inf
    or an int too large for a float, :class:`NumberTypeError` if not a number (or a
    bool)."""
    if isinstance(value, bool):
        raise NumberTypeError(f"{field} must be a number, got bool")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise NumberTypeError(
            f"{field} must be a number, got {type(value).__name__}"
        ) from exc
    except OverflowError:  # an int beyond the float range (10**400)
        raise ValueError(
            f"{field} must be finite, got an int too large for a float"
        ) from None
    if not math.isfinite(out):
        raise ValueError(f"{field} must be finite, got {value!r}")
    return out


def strict_finite(field: str, value: float) -> float:
    """:func:`finite` that also refuses text (``float("0.5")`` would accept a string).

    For plain arguments; pydantic fields keep their lax parsing of numeric strings.
    """
    if isinstance(value, str | bytes | bytearray):
        raise NumberTypeError(f"{field} must be a number, got {type(value).__name__}")
    return finite(field, value)


def clamp(value: float, low: float, high: float) -> float:
    """Clamp ``value`` into ``[low, high]``."""
    return max(low, min(high, value))


def in_range(field: str, value: float, low: float, high: float) -> float:
    """Check ``low <= value <= high`` (after a finiteness check)."""
    value = finite(field, value)
    if not low <= value <= high:
        raise ValueError(f"{field} must lie in [{low}, {high}], got {value}")
    return value


def positive(field: str, value: float) -> float:
    """Check ``value > 0`` (after a finiteness check)."""
    value = finite(field, value)
    if not value > 0:
        raise ValueError(f"{field} must be > 0, got {value}")
    return value


def non_negative(field: str, value: float) -> float:
    """Check ``value >= 0`` (after a finiteness check)."""
    value = finite(field, value)
    if value < 0:
        raise ValueError(f"{field} must be >= 0, got {value}")
    return value


MAX_WEIGHT_TOTAL = 1e300
"""Largest total magnitude of a weight vector: the adaptive weights scale and then
normalise by the sum, which must stay a finite float64 (docs/behaviour.md §4)."""


def weight_vector(
    field: str, values: Sequence[Any], length: int = 6, *, nonneg: bool = True,
    weights: bool = False,
) -> list[float]:
    """Validate a vector of exactly ``length`` finite numbers (non-negative if ``nonneg``).

    With ``weights``, the magnitudes must also sum to at most :data:`MAX_WEIGHT_TOTAL`
    (larger weights overflow the normalisation and zero every weight)."""
    if hasattr(values, "tolist") and not isinstance(values, list):
        values = values.tolist()
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise TypeError(f"{field} must be a sequence of {length} numbers")
    if len(values) != length:
        raise ValueError(f"{field} must have exactly {length} elements, got {len(values)}")
    out = [finite(f"{field}[{i}]", v) for i, v in enumerate(values)]
    for i, v in enumerate(out):
        if nonneg and v < 0:
            raise ValueError(f"{field}[{i}] must be >= 0, got {v}")
    if weights:
        total = sum(abs(v) / MAX_WEIGHT_TOTAL for v in out)  # scaled: cannot overflow
        if total > 1.0:
            raise ValueError(
                f"{field} magnitudes sum to more than MAX_WEIGHT_TOTAL = 1e300 "
                f"({total:.3g} times it): the weight normalisation would overflow"
            )
    return out


def aware(field: str, value: datetime) -> datetime:
    """Require a timezone-aware datetime (naive ones are ambiguous across machines)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{field} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field} must be timezone-aware")
    return value


INSTANT_PATTERN = (
    r"^(?!0000)[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-5][0-9]"
    r"(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
"""The timestamp strings taken (``where`` on ``timestamp``, ``expires_at``): RFC 3339
date-times, ``T`` and ``Z`` in either case (as RFC 3339 allows), an offset required;
no leap second, no year 0 (no datetime holds them). Published in the OpenAPI
document (an ECMA-262 regex too)."""
_INSTANT = re.compile(INSTANT_PATTERN)


def parse_instant(field: str, text: str) -> datetime:
    """The aware datetime an RFC 3339 string names (:data:`INSTANT_PATTERN`).

    A fraction past microseconds is truncated (as pydantic and ``fromisoformat`` do).

    Args:
        field: the name a failure gives.
        text: the string.

    Returns:
        The datetime, in the string's own offset.

    Raises:
        ValueError: ``text`` is no such date-time (ISO basic format, a space for
            ``T``, no seconds or offset, an impossible date or offset...).
    """
    found = _INSTANT.fullmatch(text)
    try:
        if found is None:
            raise ValueError("not of the form")
        zone = found.group(2)
        tz = UTC
        if zone not in ("Z", "z"):
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError("no such offset")
            sign = -1 if zone[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        fraction = (found.group(1) or ".")[1:]
        return datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]),
            int(text[14:16]), int(text[17:19]), int(fraction[:6].ljust(6, "0")), tzinfo=tz,
        )
    except ValueError:
        raise ValueError(
            f"{field} must be a timezone-aware RFC 3339 date-time "
            f"(YYYY-MM-DDTHH:MM:SS[.ffffff] then Z or +HH:MM), got {text!r}"
        ) from None


def in_utc(field: str, value: datetime) -> datetime:
    """An aware datetime as UTC, when its instant lies in the years 1..9999 there.

    Args:
        field: the name a failure gives.
        value: an aware datetime (see :func:`aware`).

    Returns:
        ``value`` in ``UTC``.

    Raises:
        ValueError: the instant is outside the years 1 to 9999 in UTC (e.g.
            ``9999-12-31T23:59:59-12:00``), which no store can keep.
    """
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{field} is outside the years 1 to 9999 in UTC, got {value.isoformat()}"
        ) from None


_MINUTE = timedelta(minutes=1)


def json_instant(moment: datetime | None) -> datetime | None:
    """``moment``, or its instant in UTC when its UTC offset has seconds: JSON (as
    pydantic writes it) keeps an offset's hours and minutes only, which would move
    the instant.

    Args:
        moment: an aware datetime, or None.

    Returns:
        ``moment`` itself, or the same instant in UTC (``moment`` again when no UTC
        datetime holds it).
    """
    offset = None if moment is None else moment.utcoffset()
    if moment is None or offset is None or not offset % _MINUTE:
        return moment
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # no UTC datetime holds it: written as JSON writes it
        return moment


def instance(field: str, value: Any, cls: type[Any], *, optional: bool = False) -> Any:
    """``value`` when it is a ``cls`` (or None with ``optional``), else ``TypeError``
    naming ``field`` and the type it got."""
    if (optional and value is None) or isinstance(value, cls):
        return value
    wanted = f"a {cls.__name__} or None" if optional else f"a {cls.__name__}"
    raise TypeError(f"{field} must be {wanted}, got {type(value).__name__}")


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


def not_bool(field: str, value: Any) -> Any:
    """``value`` unless it is a bool (Python's or numpy's), which is a
    :class:`NumberTypeError` naming ``field`` (pydantic's lax int would take ``True``
    as 1)."""
    if isinstance(value, bool | np.bool_):
        raise NumberTypeError(f"{field} must be an int, got bool")
    return value


def integer(field: str, value: Any) -> int:
    """An integer of any sign (numpy integers accepted; bools and floats rejected).

    Raises:
        NumberTypeError: not an integer (a ``TypeError``), naming ``field``.
    """
    not_bool(field, value)
    try:
        return operator.index(value)
    except TypeError as exc:
        raise NumberTypeError(
            f"{field} must be an int, got {type(value).__name__}"
        ) from exc


def int_at_least(field: str, value: Any, low: int) -> int:
    """An integer >= ``low`` (numpy integers accepted; bools and floats rejected).

    Raises:
        TypeError: not an integer. ValueError: < ``low``.
    """
    out = integer(field, value)
    if out < low:
        raise ValueError(f"{field} must be >= {low}, got {out}")
    return out


def non_negative_int(field: str, value: Any) -> int:
    """An integer >= 0 (see :func:`int_at_least`)."""
    return int_at_least(field, value, 0)


def check_page(offset: Any, limit: Any) -> tuple[int, int]:
    """A store's ``list_page`` arguments: both integers >= 0, each named when not.

    Returns:
        ``(offset, limit)`` as ints.
    """
    return non_negative_int("offset", offset), non_negative_int("limit", limit)


def check_after(position: Any, limit: Any) -> tuple[int, int]:
    """A store's ``list_after`` arguments: ``position`` None or a cursor (an int >= 0),
    ``limit`` an int >= 1; each named when not (a ValueError).

    Returns:
        ``(cursor, limit)``, the cursor -1 for None (before every memory).
    """
    if position is None:
        cursor = -1
    elif isinstance(position, bool) or not isinstance(position, int | np.integer) or position < 0:
        raise ValueError(
            "position must be None or a cursor list_after returned (an int >= 0), "
            f"got {position!r}"[:200]
        )
    else:
        cursor = int(position)
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}"[:200])
    return cursor, int(limit)


def positive_int(field: str, value: Any) -> int:
    """An integer >= 1 (see :func:`int_at_least`)."""
    return int_at_least(field, value, 1)


MAX_METADATA_DEPTH = 32
"""How deeply metadata may nest (a dict or list inside another counts one level)."""


def memory_id(value: object, field: str = "memory_id") -> str:
    """Check that a memory id is a ``str`` (a list would fail later as "unhashable").

    Args:
        value: the id given.
        field: the argument's name, used in the message.

    Returns:
        ``value``.

    Raises:
        TypeError: ``value`` is not a str.
    """
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}: {value!r:.80}")
    return value


def json_metadata(field: str, value: Any) -> dict[str, Any]:
    """Check that ``value`` is JSON data a store can hold, and return a private copy.

    Metadata must be a dict with string keys whose values are strings, numbers,
    booleans, None, lists (tuples become lists) or such dicts, nested at most
    :data:`MAX_METADATA_DEPTH` levels, with strings that are valid Unicode (no lone
    surrogates). The copy shares nothing mutable with ``value``.

    Args:
        field: the argument's name, used in error messages.
        value: the metadata.

    Returns:
        A deep copy of ``value``.

    Raises:
        TypeError: ``value`` is not a dict (a :class:`FieldTypeError`, also a
            ``ValueError``), or holds a value JSON cannot represent (the message
            names its path, e.g. ``metadata['a'][2]``).
        ValueError: nesting deeper than the limit, a string that is not valid
            Unicode, or a NaN/infinite float (the path is named).
    """
    if not isinstance(value, dict):
        raise FieldTypeError(f"{field} must be a dict or None, got {type(value).__name__}")
    out: dict[str, Any] = _json_copy(field, value, 1)
    return out


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    """A batch of texts as a list, each item a ``str``.

    Args:
        texts: candidate batch (any iterable of str but a str or bytes).
        name: how to refer to it in error messages.

    Returns:
        The texts as a new list.

    Raises:
        TypeError: ``texts`` is a single str, bytes or no iterable (``name`` named), or
            an item is no str (``text (<name>[i])`` named).
    """
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a sequence of str, not a single str (use embed)")
    if isinstance(texts, bytes | bytearray | memoryview) or not isinstance(texts, Iterable):
        raise TypeError(f"{name} must be a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"text ({name}[{i}]) must be str, got {type(t).__name__}")
    return out


def _check_text(path: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{path} is not valid Unicode text: {exc.reason}") from None


def _json_copy(path: str, value: Any, depth: int) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path} is {value!r}, which JSON cannot represent (finite numbers only)")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        _check_text(path, value)
        return value
    if isinstance(value, dict | list | tuple):
        if depth > MAX_METADATA_DEPTH:
            raise ValueError(
                f"{path} nests deeper than {MAX_METADATA_DEPTH} levels (MAX_METADATA_DEPTH)"
            )
        if isinstance(value, dict):
            copied: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"{path} has a key {key!r} of type {type(key).__name__}; "
                        "metadata keys must be str (JSON object keys)"
                    )
                _check_text(f"{path} key {key!r}", key)
                copied[key] = _json_copy(f"{path}[{key!r}]", item, depth + 1)
            return copied
        return [_json_copy(f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value)]
    raise TypeError(
        f"{path} is a {type(value).__name__}, which is not JSON-serialisable "
        "(metadata holds str, int, float, bool, None, lists and dicts)"
    )


def validation_summary(exc: Any) -> str:
    """A pydantic ``ValidationError`` as one line: ``field.path: message`` per error.

    Args:
        exc: the error (anything with pydantic's ``errors()``).

    Returns:
        The problems joined by ``"; "`` (``config`` names an error of the whole object).
    """
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'config'}: {' '.join(str(e['msg']).split())}"
        for e in exc.errors()
    )
