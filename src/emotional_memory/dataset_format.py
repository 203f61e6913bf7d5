"""The realistic-recall dataset format: reading a JSON file and checking its shape.

A dataset is an object with a ``scenarios`` list; a scenario holds ``sessions`` of
``events`` (content, optional valence/arousal, metadata, timestamp) and labelled
``queries`` (expected memory ids, optional query-time ``state``). Fields one letter
away from a format field are warned about once each; other extra fields are kept.
:mod:`emotional_memory.replay` replays such datasets through the engine.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory._validation import json_metadata
from emotional_memory._warn import warn_caller

__all__ = ["event_time", "load_dataset", "validate_dataset"]


def event_time(event: dict[str, Any]) -> datetime | None:
    """An event's ``timestamp`` (ISO 8601 with a timezone), or None without one.

    Raises:
        ValueError: a time without a timezone, or not ISO 8601.
    """
    raw = event.get("timestamp")
    if raw is None:
        return None
    ts = datetime.fromisoformat(str(raw))
    if ts.tzinfo is None:
        raise ValueError(f"event {event.get('memory_id')!r}: timestamp must carry a timezone")
    return ts


def load_dataset(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a realistic-recall JSON file (:func:`validate_dataset`).

    Args:
        path: Path of the JSON dataset.

    Returns:
        The parsed dataset (an object with a ``scenarios`` list).

    Raises:
        ValueError: when the file is not JSON or the dataset is malformed (the message
            names the file, the place and the field).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON for a dataset (nested too deeply)") from None
    validate_dataset(data, str(path))
    return data


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


def _text(where: str, key: str, value: object) -> None:
    """Refuse a ``key`` that is no non-empty string, or not valid Unicode (a lone
    surrogate, which JSON's ``\\ud800`` escapes can carry and no store can hold)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: '{key}' is not valid Unicode text ({exc.reason} at "
                         f"index {exc.start})") from None


def _is_id(value: object) -> bool:
    return (isinstance(value, str) and value != "") or (
        isinstance(value, int) and not isinstance(value, bool))


_FIELDS = {
    "dataset": ("scenarios", "default_top_k", "name", "description", "version"),
    "scenario": ("scenario_id", "sessions", "description"),
    "session": ("session_id", "events", "queries", "description"),
    "event": ("memory_id", "content", "valence", "arousal", "metadata", "timestamp"),
    "query": ("query_id", "query", "expected_memory_ids", "state", "challenge_type"),
    "state": ("valence", "arousal"),
}
"""The fields of each part of the format; others are kept but not read."""


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one insertion, deletion, substitution or swap
    of neighbours."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") else word


def _misspelt(key: object, part: str) -> str | None:
    """The field of ``part`` that ``key`` nearly spells (one letter away, or its
    plural), None when it is one of them or none is near."""
    known = _FIELDS[part]
    if not isinstance(key, str) or key in known:
        return None
    return next((f for f in known if _one_edit(key, f) or _singular(key) == _singular(f)),
                None)


def _warn_misspellings(data: dict[str, Any], source: str) -> None:
    """Warn once per misspelt field (``valance``, ``querys``) of each part of the
    dataset, naming its first place and how many have it: fields other than the
    format's are kept but not read, so a misspelt one would be lost without a word."""
    found: dict[tuple[str, str], list[Any]] = {}

    def look(where: str, obj: object, part: str) -> None:
        for key in obj if isinstance(obj, dict) else ():
            meant = _misspelt(key, part)
            if meant is not None:
                found.setdefault((part, key), [where, 0, meant])[1] += 1

    def items(holder: object, key: str) -> list[Any]:
        value = holder.get(key) if isinstance(holder, dict) else None
        return value if isinstance(value, list) else []

    look(source, data, "dataset")
    for i, scenario in enumerate(items(data, "scenarios")):
        look(f"{source}: scenarios[{i}]", scenario, "scenario")
        for j, session in enumerate(items(scenario, "sessions")):
            at = f"{source}: scenarios[{i}] sessions[{j}]"
            look(at, session, "session")
            for k, event in enumerate(items(session, "events")):
                look(f"{at} events[{k}]", event, "event")
            for k, query in enumerate(items(session, "queries")):
                look(f"{at} queries[{k}]", query, "query")
                look(f"{at} queries[{k}] state",
                     query.get("state") if isinstance(query, dict) else None, "state")
    for (_, key), (where, count, meant) in found.items():
        more = f" ({count} places have it)" if count > 1 else ""
        warn_caller(f"{where}: field {key!r} is not read (a misspelling of {meant!r}?)"
                    f"{more}", UserWarning)


def _check_affect(where: str, obj: dict[str, Any], required: bool) -> None:
    """``valence`` in [-1, 1] and ``arousal`` in [0, 1], both or (unless required)
    neither."""
    given = [k for k in ("valence", "arousal") if obj.get(k) is not None]
    if not given and not required:
        return
    if len(given) < 2:
        missing = "arousal" if given == ["valence"] else "valence"
        raise ValueError(f"{where}: '{missing}' is missing (valence and arousal go "
                         "together)")
    for key, low in (("valence", -1.0), ("arousal", 0.0)):
        value = obj[key]
        if not _is_number(value) or not low <= value <= 1.0:
            raise ValueError(f"{where}: '{key}' must be a number in [{low:g}, 1], got {value!r}")


def _check_event(where: str, event: object) -> str:
    """Check one event; its memory id as a string."""
    if not isinstance(event, dict):
        raise ValueError(f"{where}: expected an object, got {type(event).__name__}")
    if not _is_id(event.get("memory_id")):
        raise ValueError(f"{where}: 'memory_id' must be a non-empty string, got "
                         f"{event.get('memory_id')!r}")
    where = f"{where} ({event['memory_id']!r})"
    _text(where, "content", event.get("content"))
    _check_affect(where, event, required=False)
    if event.get("metadata") is not None:
        if not isinstance(event["metadata"], dict):
            raise ValueError(f"{where}: 'metadata' must be an object")
        try:  # what a store can hold: finite numbers, valid Unicode, bounded depth
            json_metadata("metadata", event["metadata"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    if event.get("timestamp") is not None:
        try:
            event_time(event)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: 'timestamp' must be ISO 8601 with a timezone "
                             f"({exc})") from None
    return str(event["memory_id"])


def _check_query(where: str, query: object, encoded: set[str] | None) -> None:
    """Check one query; ``encoded``: the scenario's memory ids encoded before it
    (None: expected ids need not name events)."""
    if not isinstance(query, dict):
        raise ValueError(f"{where}: expected an object, got {type(query).__name__}")
    if query.get("query_id") is not None:
        if not _is_id(query["query_id"]):
            raise ValueError(f"{where}: 'query_id' must be a non-empty string, got "
                             f"{query['query_id']!r}")
        where = f"{where} ({query['query_id']!r})"
    _text(where, "query", query.get("query"))
    expected = query.get("expected_memory_ids")
    if not expected:
        raise ValueError(f"{where}: query {query.get('query_id')!r} has no "
                         "expected_memory_ids")
    if not isinstance(expected, list) or not all(_is_id(x) for x in expected):
        raise ValueError(f"{where}: 'expected_memory_ids' must be a list of memory ids, "
                         f"got {expected!r}")
    unknown = [] if encoded is None else [x for x in expected if str(x) not in encoded]
    if unknown:
        raise ValueError(f"{where}: 'expected_memory_ids' {unknown!r} name no event of "
                         "this scenario encoded before the query (this or an earlier "
                         "session)")
    if query.get("state") is not None:
        if not isinstance(query["state"], dict):
            raise ValueError(f"{where}: 'state' must be an object with valence and arousal")
        _check_affect(f"{where} state", query["state"], required=True)
    challenge = query.get("challenge_type")
    if challenge is not None and not isinstance(challenge, str):
        raise ValueError(f"{where}: 'challenge_type' must be a string, got {challenge!r}")


def _entries(where: str, holder: dict[str, Any], key: str) -> list[Any]:
    """``holder[key]`` (a list; absent: empty)."""
    value = holder.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"{where}: '{key}' must be a list, got {type(value).__name__}")
    return value


def check_scenario(where: str, scenario: dict[str, Any], labelled: bool = True) -> int:
    """Check one scenario's sessions (``labelled``: expected ids name earlier events);
    its number of queries."""
    sessions = scenario.get("sessions")
    if not isinstance(sessions, list):
        raise ValueError(f"{where}: 'sessions' must be a list, got {type(sessions).__name__}")
    encoded: set[str] = set()
    n_queries = 0
    for j, session in enumerate(sessions):
        at = f"{where} sessions[{j}]"
        if not isinstance(session, dict):
            raise ValueError(f"{at}: expected an object, got {type(session).__name__}")
        for k, event in enumerate(_entries(at, session, "events")):
            mid = _check_event(f"{at} events[{k}]", event)
            if mid in encoded:
                raise ValueError(f"{at} events[{k}]: duplicate memory_id {mid!r} in the "
                                 "scenario")
            encoded.add(mid)
        queries = _entries(at, session, "queries")
        for k, query in enumerate(queries):
            _check_query(f"{at} queries[{k}]", query, encoded if labelled else None)
        n_queries += len(queries)
    return n_queries


def validate_dataset(data: object, source: str = "dataset", *, labelled: bool = True) -> None:
    """Check a realistic-recall dataset before anything is replayed or fitted.

    Every scenario needs a unique ``scenario_id`` and a ``sessions`` list; events a
    unique ``memory_id`` and a non-empty ``content`` (``valence`` in [-1, 1] and
    ``arousal`` in [0, 1] both or neither, optional ``metadata`` object and ISO 8601
    ``timestamp`` with a timezone; text and metadata a store can hold: valid Unicode,
    finite numbers); queries a non-empty ``query``, an optional ``query_id`` (a
    string or int), and a non-empty list
    ``expected_memory_ids`` naming events of their scenario encoded before them (in
    their own or an earlier session), and an optional ``state`` with both valence and
    arousal. ``default_top_k``, when given, is an int >= 1. At least one query. Other
    fields are kept but not read; one a letter away from a field of its part
    (``valance``) or its plural (``querys``) is warned about (``UserWarning``).

    Args:
        data: the parsed JSON.
        source: what to name in the messages (the file).
        labelled: False checks every field but lets expected ids name no event and
            the dataset hold no query (what a replay of an ablation needs).

    Raises:
        ValueError: one line naming ``source``, the place (``scenarios[i] sessions[j]
            events[k]``, with the ids) and the field.
    """
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), list):
        raise ValueError(f"{source}: expected an object with a 'scenarios' list")
    _warn_misspellings(data, source)
    top_k = data.get("default_top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool)
                              or top_k < 1):
        raise ValueError(f"{source}: 'default_top_k' must be an int >= 1, got {top_k!r}")
    seen: set[str] = set()
    n_queries = 0
    for i, scenario in enumerate(data["scenarios"]):
        where = f"{source}: scenarios[{i}]"
        if not isinstance(scenario, dict):
            raise ValueError(f"{where}: expected an object, got {type(scenario).__name__}")
        sid = scenario.get("scenario_id")
        if not _is_id(sid):
            raise ValueError(f"{where}: 'scenario_id' must be a non-empty string, got {sid!r}")
        if str(sid) in seen:
            raise ValueError(f"{where}: duplicate scenario_id {sid!r}")
        seen.add(str(sid))
        n_queries += check_scenario(f"{where} ({sid!r})", scenario, labelled)
    if n_queries == 0 and labelled:
        raise ValueError(f"{source}: no queries (a dataset needs labelled queries)")
