"""The ``/openapi.json`` an app serves: FastAPI's document, made to say what the
routes accept.

FastAPI builds the document from the routes and models, which are shared by every
app; what depends on one app is put in here, per app: the service's configured
:class:`~emotional_memory.server.limits.Limits` as JSON Schema bounds (``maximum``
of ``top_k`` and of the list's ``limit``, ``maxItems`` of a batch's ``items``), and
in the descriptions those with no exact keyword (bytes of content and metadata:
``maxLength`` counts characters; a filter's clause count). A filter is published
as its grammar (:func:`filter_schemas`), its ``$and``/``$or`` nesting unrolled to
the app's ``max_filter_depth``. A query parameter read as JSON (``where``) is
published as ``content: application/json``, so that clients and fuzzers send a
JSON object rather than any string. Without a relevance
calibration, ``min_relevance`` is published as null only (a number is a 422).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from fastapi import FastAPI

from emotional_memory.filters import BUILTIN_FIELDS
from emotional_memory.server.limits import LIMIT_FLAGS, Limits
from emotional_memory.server.schemas import INSTANT_SCHEMA, publish_uncalibrated

__all__ = [
    "FILTER_REF", "JSON_QUERY", "filter_limits_text", "filter_schemas", "install_openapi",
    "publish",
]

FILTER_REF = "#/components/schemas/Filter"
JSON_QUERY: dict[str, dict[str, Any]] = {"where": {"$ref": FILTER_REF}}
"""The query parameters read as JSON, with the JSON Schema of their value."""
PARSER_DEPTH = 32
"""The deepest ``$and``/``$or`` nesting the filter parser reads, whatever the limit."""
FIELD_NAME = r"^[^$.][^.]*(\.[^.]+)*$"
"""A metadata field: not an operator, no empty dotted segment."""
DATE_TIME = INSTANT_SCHEMA
"""A filter's timestamp: the strings ``expires_at`` takes too."""
_BOUNDS = {"minimum": -int(sys.float_info.max), "maximum": int(sys.float_info.max)}
"""A filter's numbers: those a float holds (a longer integer is refused); exact integers,
as a validator compares a bound exactly and a float's shortest decimal is not its value."""
_NUMERIC = ("valence", "arousal", "dominance", "retrieval_count")


def _limit(limits: Limits, name: str) -> str:
    """A limit's value with the ``serve`` flag that sets it, for a description."""
    return f"{getattr(limits, name)} (--{LIMIT_FLAGS[name]})"


def _integer(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``integer`` branch of an optional integer's schema (or the schema itself)."""
    branches = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "integer"]
    if len(branches) != 1:
        raise ValueError(f"not an integer schema: {schema!r}")
    found: dict[str, Any] = branches[0]
    return found


def _add_text(schema: dict[str, Any], text: str) -> None:
    """Append ``text`` to ``schema``'s description (in place)."""
    schema["description"] = f"{schema.get('description', '').rstrip()} {text}".strip()


def filter_limits_text(limits: Limits) -> str:
    """What a filter's description says of the app's clause and depth limits.

    Args:
        limits: the app's limits.

    Returns:
        One sentence naming each limit's value and its ``serve`` flag.
    """
    return (f"At most {_limit(limits, 'max_filter_clauses')} clauses (comparisons and "
            f"$in/$nin values) and $and/$or nesting {_limit(limits, 'max_filter_depth')}.")


def _field(eq: dict[str, Any], ordered: dict[str, Any]) -> dict[str, Any]:
    """A field's value in a filter: ``eq`` (equality) or an operator object."""
    ops = {"$eq": eq, "$ne": eq, **dict.fromkeys(("$gt", "$gte", "$lt", "$lte"), ordered),
           "$in": {"type": "array", "items": eq}, "$nin": {"type": "array", "items": eq},
           "$exists": {"type": "boolean"}}
    return {"anyOf": [eq, {"type": "object", "properties": ops, "minProperties": 1,
                           "additionalProperties": False}]}


def filter_schemas(limits: Limits) -> dict[str, dict[str, Any]]:
    """The JSON Schemas of a filter (:mod:`emotional_memory.filters`), by component name.

    ``Filter`` is a clause; its ``$and``/``$or`` lists hold ``Filter_1`` clauses, and
    so on down to the deepest nesting the limit (and the parser) allows, which takes
    no ``$and``/``$or``. The clause count has no keyword (it is in the text).

    Args:
        limits: the app's limits (``max_filter_depth``).

    Returns:
        ``{name: schema}`` for ``components.schemas``.
    """
    scalar = {"type": ["string", "number", "boolean", "null"], **_BOUNDS}
    fields = {
        "FilterValue": _field(scalar, {"type": ["number", "string"], **_BOUNDS}),
        "FilterNumber": _field({"type": ["number", "null"], **_BOUNDS},
                               {"type": "number", **_BOUNDS}),
        "FilterLabel": _field({"type": ["string", "null"]}, {"type": "string"}),
        "FilterTime": _field({"anyOf": [DATE_TIME, {"type": "null"}]}, DATE_TIME),
    }
    kinds = {name: "FilterNumber" for name in _NUMERIC} | {
        "emotion": "FilterLabel", "timestamp": "FilterTime"}
    assert set(kinds) == BUILTIN_FIELDS
    builtins = {name: {"$ref": f"#/components/schemas/{kind}"} for name, kind in kinds.items()}
    deepest = min(limits.max_filter_depth, PARSER_DEPTH)
    names = ["Filter", *(f"Filter_{d}" for d in range(1, deepest + 1))]
    out: dict[str, dict[str, Any]] = dict(fields)
    for depth, name in enumerate(names):
        props: dict[str, Any] = dict(builtins)
        if depth < deepest:
            below = {"type": "array", "minItems": 1,
                     "items": {"$ref": f"#/components/schemas/{names[depth + 1]}"}}
            props |= {"$and": below, "$or": below}
        out[name] = {
            "type": "object", "minProperties": 1, "properties": props,
            "patternProperties": {FIELD_NAME: {"$ref": "#/components/schemas/FilterValue"}},
            "additionalProperties": False,
        }
    out["Filter"]["description"] = (
        '{"field": value} or {"field": {"$op": value}}; ops $eq $ne $gt $gte $lt $lte '
        "$in $nin $exists; $and / $or take lists of clauses. Fields are metadata keys "
        "(dotted paths) and the built-ins timestamp (RFC 3339 with offset), valence, "
        "arousal, dominance, retrieval_count (numbers) and emotion (a label). "
        + filter_limits_text(limits))
    return out


def _json_query(param: dict[str, Any], limits: Limits) -> None:
    """Publish a JSON query parameter as ``content``, with the filter's limits."""
    value = copy.deepcopy(JSON_QUERY[param["name"]])
    param.pop("schema", None)
    param["content"] = {"application/json": {"schema": value}}
    if param["name"] == "where":
        _add_text(param, filter_limits_text(limits))


def _bodies(schemas: dict[str, Any], limits: Limits, calibrated: bool) -> None:
    """The limits of the request bodies' fields (and ``min_relevance``)."""
    _integer(schemas["SearchIn"]["properties"]["top_k"])["maximum"] = limits.max_top_k
    schemas["BatchIn"]["properties"]["items"]["maxItems"] = limits.max_batch_items
    content = _limit(limits, "max_content_bytes")
    metadata = _limit(limits, "max_metadata_bytes")
    for name in ("ItemIn", "MemoryIn"):
        props = schemas[name]["properties"]
        _add_text(props["content"], f"At most {content} UTF-8 bytes.")
        _add_text(props["metadata"], f"At most {metadata} bytes as compact JSON.")
    search = schemas["SearchIn"]["properties"]
    _add_text(search["query"], f"At most {content} UTF-8 bytes.")
    _add_text(search["where"], filter_limits_text(limits))
    search["where"]["anyOf"] = [{"$ref": FILTER_REF}, {"type": "null"}]
    schemas.update(filter_schemas(limits))
    if not calibrated:
        publish_uncalibrated(search["min_relevance"])


def publish(doc: dict[str, Any], limits: Limits, calibrated: bool = True) -> dict[str, Any]:
    """``doc`` (FastAPI's document, changed in place) with an app's limits and its
    JSON query parameters.

    Args:
        doc: the OpenAPI document FastAPI built (a copy of its own).
        limits: the app's limits.
        calibrated: whether the service has a relevance calibration (without one,
            ``min_relevance`` takes null only).

    Returns:
        ``doc``.
    """
    _bodies(doc["components"]["schemas"], limits, calibrated)
    for ops in doc["paths"].values():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param.get("in") != "query":
                    continue
                if param["name"] in JSON_QUERY:
                    _json_query(param, limits)
                elif param["name"] == "limit":
                    _integer(param["schema"])["maximum"] = limits.max_list_limit
    return doc


def install_openapi(api: FastAPI, limits: Limits, calibrated: bool) -> None:
    """Make ``api`` serve :func:`publish`'s document (built once, on first use).

    Args:
        api: the app.
        limits: its service's limits.
        calibrated: whether its service has a relevance calibration.
    """
    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = publish(copy.deepcopy(FastAPI.openapi(api)), limits,
                                         calibrated)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
