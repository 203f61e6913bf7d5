"""One call to set up the ``emotional_memory`` logger: level, text or JSON lines.

``configure_logging()`` reads ``EMOTIONAL_MEMORY_LOG_LEVEL`` (default ``WARNING``);
``configure_logging(json_format=True)`` writes one JSON object per record, ready for
log collectors. Calling it again replaces the handler it installed (never stacks).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO, Any

__all__ = ["LOGGER_NAME", "JsonFormatter", "configure_logging"]

LOGGER_NAME = "emotional_memory"
"""The package's root logger; every module logs under it."""

_LEVEL_ENV = "EMOTIONAL_MEMORY_LOG_LEVEL"
_HANDLER_MARK = "_emotional_memory_handler"
# Attributes every LogRecord has; anything else came from ``extra=`` and is kept.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON.

    Fields: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, plus
    ``exc_info`` / ``stack_info`` when present and any ``extra=`` fields (one named like
    a record field, e.g. ``level``, is written as ``extra_level``). Objects JSON
    cannot hold are written as ``str(value)``; so is an ``extra=`` field JSON cannot
    encode as given (a NaN or infinite float, a dict with non-string keys, a cycle),
    so every line is strict JSON.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record``.

        Args:
            record: The log record.

        Returns:
            A single-line JSON object.
        """
        payload: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack_info"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                name = key
                while name in payload:  # a record field, or a prefixed name taken already
                    name = f"extra_{name}"
                payload[name] = value
        try:
            return json.dumps(payload, default=str, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            safe = {key: _json_field(value) for key, value in payload.items()}
            return json.dumps(safe, default=str, ensure_ascii=False, allow_nan=False)


def _json_field(value: Any) -> Any:
    """``value`` when strict JSON can encode it, else ``str(value)``."""
    try:
        json.dumps(value, default=str, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)
    return value


def _level(level: str | int | None) -> int:
    if level is None:
        from_env = os.environ.get(_LEVEL_ENV, "").strip()
        try:
            return _level(from_env or "WARNING")
        except ValueError as exc:
            raise ValueError(f"{_LEVEL_ENV}: {exc}") from None
    if isinstance(level, bool):
        raise TypeError("level must be a str or int")
    if isinstance(level, int):
        return level
    if isinstance(level, str):
        name = level.strip().upper()
        if name.isdigit():
            return int(name)
        value = logging.getLevelName(name)
        if isinstance(value, int):
            return value
        raise ValueError(f"unknown log level {level!r}")
    raise TypeError("level must be a str or int")


def configure_logging(
    level: str | int | None = None,
    *,
    json_format: bool = False,
    stream: IO[str] | None = None,
) -> logging.Logger:
    """Configure the ``emotional_memory`` logger.

    Args:
        level: A level name (``"DEBUG"``, ``"info"``, ...) or number; None reads
            ``EMOTIONAL_MEMORY_LOG_LEVEL``, falling back to ``WARNING``.
        json_format: Write JSON lines (:class:`JsonFormatter`) instead of text.
        stream: Where to write (default ``sys.stdout``).

    Returns:
        The configured logger.

    Raises:
        ValueError: On an unknown level name (naming ``EMOTIONAL_MEMORY_LOG_LEVEL`` when
            it came from there).
        TypeError: When ``level`` is neither a str nor an int.
    """
    numeric = _level(level)
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                fmt="%(asctime)s | %(name)s | %(levelname)s | %(message)s",
                datefmt="%Y-%m-%d %H:%M:%S",
            )
        )
    setattr(handler, _HANDLER_MARK, True)
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
        old.close()
    logger.addHandler(handler)
    logger.setLevel(numeric)
    return logger
