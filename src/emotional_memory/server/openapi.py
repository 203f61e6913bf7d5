"""The ``/openapi.json`` an app serves: FastAPI's document, made to say what the
routes accept.

FastAPI builds the document from the routes and models, which are shared by every
app; what depends on one app is put in here, per app: the service's configured
:class:`~emotional_memory.server.limits.Limits` as JSON Schema bounds (``maximum``
of ``top_k`` and of the list's ``limit``, ``maxItems`` of a batch's ``items``), and
in the descriptions those with no exact keyword (bytes of content and metadata:
``maxLength`` counts characters; a filter's clauses and depth). A query parameter
read as JSON (``where``) is published as ``content: application/json``, so that
clients and fuzzers send a JSON object rather than any string.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI

from emotional_memory.server.limits import LIMIT_FLAGS, Limits

__all__ = ["JSON_QUERY", "install_openapi", "publish"]

JSON_QUERY: dict[str, dict[str, Any]] = {"where": {"type": "object"}}
"""The query parameters read as JSON, with the JSON Schema of their value."""


def _limit(limits: Limits, name: str) -> str:
    return f"{getattr(limits, name)} (--{LIMIT_FLAGS[name]})"


def _integer(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``integer`` branch of an optional integer's schema (or the schema itself)."""
    branches = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "integer"]
    if len(branches) != 1:
        raise ValueError(f"not an integer schema: {schema!r}")
    found: dict[str, Any] = branches[0]
    return found


def _add_text(schema: dict[str, Any], text: str) -> None:
    schema["description"] = f"{schema.get('description', '').rstrip()} {text}".strip()


def _filter_text(limits: Limits) -> str:
    return (f"At most {_limit(limits, 'max_filter_clauses')} clauses (comparisons and "
            f"$in/$nin values) and $and/$or nesting {_limit(limits, 'max_filter_depth')}.")


def _json_query(param: dict[str, Any], limits: Limits) -> None:
    """Publish a JSON query parameter as ``content``, with the filter's limits."""
    value = copy.deepcopy(JSON_QUERY[param["name"]])
    param.pop("schema", None)
    param["content"] = {"application/json": {"schema": value}}
    if param["name"] == "where":
        _add_text(param, _filter_text(limits))


def _bodies(schemas: dict[str, Any], limits: Limits) -> None:
    """The limits of the request bodies' fields."""
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
    _add_text(search["where"], _filter_text(limits))


def publish(doc: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``doc`` (FastAPI's document, changed in place) with an app's limits and its
    JSON query parameters.

    Args:
        doc: the OpenAPI document FastAPI built (a copy of its own).
        limits: the app's limits.

    Returns:
        ``doc``.
    """
    _bodies(doc["components"]["schemas"], limits)
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


def install_openapi(api: FastAPI, limits: Limits) -> None:
    """Make ``api`` serve :func:`publish`'s document (built once, on first use).

    Args:
        api: the app.
        limits: its service's limits.
    """
    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = publish(copy.deepcopy(FastAPI.openapi(api)), limits)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
