"""The REST API under ``/v1``: each route checks its input and makes one service call.

Routes get the caller's :class:`~emotional_memory.server.keys.Principal` from the
auth middleware (:mod:`emotional_memory.server.app`) and work in its scope, narrowed
by the request's ``scope``. A memory outside that scope answers as an unknown id
(404).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from pydantic import BaseModel

from emotional_memory.filters import Where
from emotional_memory.server.keys import PRINCIPAL_KEY, Principal, narrowed
from emotional_memory.server.schemas import (
    MAX_SCOPE_DEPTH,
    MAX_UNKNOWN_NAMED,
    BatchIn,
    ErrorOut,
    MemoriesOut,
    MemoryIn,
    MemoryOut,
    RememberOut,
    ScopePart,
    SearchIn,
    SearchOut,
    StateAffectIn,
    StateOut,
    memory_out,
    remember_out,
    result_out,
    state_out,
)
from emotional_memory.server.service import BatchItem, FieldError, MemoryService

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "Malformed JSON (the body, or a query "
          "parameter read as JSON: where)."},
    401: {"model": ErrorOut, "description": "No API key, or an unknown one."},
    413: {"model": ErrorOut, "description": "A size over the service's limits (content, "
          "metadata, batch items, body); detail names the field and the limit."},
    422: {"model": ErrorOut, "description": "An invalid value, or a count over the service's "
          "limits (top_k, limit, filter clauses or depth); detail names the field."},
    429: {"model": ErrorOut, "description": "The API key already has --max-in-flight "
          "requests in progress; nothing was read or changed, try again (Retry-After)."},
    503: {"model": ErrorOut, "description": "A database statement, or a wait for the "
          "scope or for a connection, past the service's timeout; nothing was changed, "
          "try again (Retry-After)."},
}
_JSON_BODY: dict[int | str, dict[str, Any]] = {
    415: {"model": ErrorOut, "description": "A body without Content-Type: application/json."}
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "No memory with this id in the key's scope."}
}

MAX_OFFSET = 2**53
"""Largest ``offset`` of ``GET /v1/memories``."""
DEFAULT_PAGE = 100
"""``GET /v1/memories``'s page size when ``limit`` is not given."""

ScopeQuery = Annotated[
    list[ScopePart] | None,
    Query(max_length=MAX_SCOPE_DEPTH,
          description="Sub-scope (repeat for each part), appended to the key's scope."),
]


def principal_of(request: Request) -> Principal:
    """The caller the auth middleware authenticated.

    Args:
        request: the request.

    Returns:
        Its principal.
    """
    principal: Principal = request.scope[PRINCIPAL_KEY]
    return principal


def _service(request: Request) -> MemoryService:
    service: MemoryService = request.app.state.service
    return service


def _scope(
    request: Request, requested: list[str] | None, loc: str
) -> tuple[Principal, tuple[str, ...]]:
    principal = principal_of(request)
    try:
        return principal, narrowed(principal, requested)
    except (TypeError, ValueError) as exc:
        raise HTTPException(
            422,
            [{"loc": [loc, "scope"], "msg": str(exc), "type": "value_error"}],
        ) from None


def _filter(request: Request, where: dict[str, Any] | None, loc: str) -> Where | None:
    """A request's filter checked and parsed, its errors located at ``[loc, "where"]``
    (``loc``: ``"body"`` or ``"query"``, where it came from)."""
    try:
        return _service(request).parse_filter(where)
    except FieldError as exc:
        raise HTTPException(
            422, [{"loc": [loc, *exc.loc], "msg": str(exc), "type": "value_error"}]
        ) from None


def _where_query(request: Request, where: str | None) -> Where | None:
    if where is None:
        return None
    try:
        parsed = json.loads(where)
    except (json.JSONDecodeError, ValueError):  # ValueError: an integer too long to read
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, "query parameter where is not valid JSON"
        ) from None
    except RecursionError:  # [[[...]]] a thousand deep: more than the parser's stack
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, "query parameter where nests too deeply to read"
        ) from None
    if not isinstance(parsed, dict):
        raise HTTPException(
            422,
            [{"loc": ["query", "where"], "msg": "where must be a JSON object",
              "type": "value_error"}],
        )
    return _filter(request, parsed, "query")


def _not_found(memory_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no memory {memory_id!r} in this scope")


async def _batch_count(request: Request) -> None:
    """Refuse a batch over ``max_batch_items`` before its items are validated.

    A FastAPI dependency, solved before the body's validation: validating every item
    of an oversized ``items`` list first would be work (and a 422 listing an error
    per item) proportional to the body, not to the limit. Reads the JSON FastAPI has
    already parsed (cached on the request).

    Raises:
        LimitExceeded: 413 at ``["body", "items"]``.
    """
    try:
        body = await request.json()
    except ValueError:  # an empty body: the body's validation answers it
        return
    items = body.get("items") if isinstance(body, dict) else None
    if isinstance(items, list):
        _service(request).limits.check_batch(len(items), ("items",))


async def _json_off_loop(build: Callable[[], BaseModel], status_code: int = 200) -> Response:
    """The model ``build()`` makes, as a JSON response built and serialised in a
    worker thread.

    A batch's, a page's or a search's answer may hold up to 1,000 memories of the
    largest content (~25 MB of JSON: ~50 ms of serialisation), which FastAPI would
    do on the event loop, stalling every other request meanwhile. The bytes are
    those FastAPI writes for ``response_model`` (``model_dump_json(by_alias=True)``).

    Args:
        build: makes the response model (runs in the worker thread).
        status_code: the response's status.

    Returns:
        An ``application/json`` response.
    """
    def dump() -> bytes:
        return build().model_dump_json(by_alias=True).encode()

    body = await anyio.to_thread.run_sync(dump)
    return Response(body, status_code=status_code, media_type="application/json")


def _query_names(route: object) -> set[str]:
    """The query parameters a route declares (its own and its dependencies'; a few
    fields to walk, so not cached: FastAPI's routes are not hashable)."""
    def names(dependant: Any) -> set[str]:
        found = {p.alias for p in dependant.query_params}
        for sub in dependant.dependencies:
            found |= names(sub)
        return found

    dependant = getattr(route, "dependant", None)
    return names(dependant) if dependant is not None else set()


def _known_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare, as a body refuses an
    unknown field: dropped, a misspelt ``?scope=`` would make a DELETE act on the
    key's whole scope and a misspelt ``?limit=`` read a page of another size.

    Raises:
        HTTPException: 422, one error at ``["query", name]`` per unknown name, or
            one at ``["query"]`` naming their count past ``MAX_UNKNOWN_NAMED``.
    """
    declared = _query_names(request.scope.get("route"))
    unknown = [k for k in dict.fromkeys(request.query_params.keys()) if k not in declared]
    takes = ", ".join(sorted(declared)) or "none"
    if len(unknown) > MAX_UNKNOWN_NAMED:
        names = ", ".join(repr(k[:32]) for k in unknown[:3])
        raise HTTPException(422, [
            {"loc": ["query"], "type": "extra_forbidden",
             "msg": f"{len(unknown)} unknown query parameters (such as {names}); this "
                    f"route takes: {takes}"}])
    if unknown:
        raise HTTPException(422, [
            {"loc": ["query", k], "msg": f"unknown query parameter (this route takes: {takes})",
             "type": "extra_forbidden"}
            for k in unknown
        ])


router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[Depends(_known_query)])


@router.post("/memories", status_code=status.HTTP_201_CREATED, response_model=RememberOut,
             responses=_JSON_BODY)
async def create_memory(body: MemoryIn, request: Request) -> RememberOut:
    """Store one memory; answer it, where its affect came from and how the mood moved."""
    principal, path = _scope(request, body.scope, "body")
    item = BatchItem(
        body.content,
        body.metadata,
        body.affect.core_affect() if body.affect is not None else None,
        body.expires_at,
    )
    done = await _service(request).remember_felt(path, item)
    return remember_out(done.memory, principal.scope, done.affect_source, done.mood_before,
                        done.mood_after)


@router.post("/memories/batch", status_code=status.HTTP_201_CREATED, response_model=MemoriesOut,
             dependencies=[Depends(_batch_count)], responses=_JSON_BODY)
async def create_memories(body: BatchIn, request: Request) -> Response:
    """Store many memories in one transaction: all of them or, on any error, none."""
    principal, path = _scope(request, body.scope, "body")
    items = [
        BatchItem(
            it.content,
            it.metadata,
            it.affect.core_affect() if it.affect is not None else None,
            it.expires_at,
        )
        for it in body.items
    ]
    memories = await _service(request).remember_batch(path, items)
    return await _json_off_loop(
        lambda: MemoriesOut(memories=[memory_out(m, principal.scope) for m in memories]),
        status.HTTP_201_CREATED,
    )


@router.post("/search", response_model=SearchOut, responses=_JSON_BODY)
async def search(body: SearchIn, request: Request) -> Response:
    """Retrieve the memories that best match a query under the scope's current mood."""
    principal, path = _scope(request, body.scope, "body")
    service = _service(request)
    given = body.top_k if "top_k" in body.model_fields_set else None
    top_k = given if given is not None else service.default_top_k
    service.limits.check_text(body.query, ("query",))
    service.limits.check_top_k(top_k, ("top_k",))
    where = _filter(request, body.where, "body")
    found = await service.search(path, body.query, top_k, where, body.min_relevance)
    return await _json_off_loop(
        lambda: SearchOut(results=[result_out(f, principal.scope, body.explain) for f in found])
    )


@router.get("/memories/{memory_id}", response_model=MemoryOut, responses=_NOT_FOUND)
async def get_memory(memory_id: str, request: Request, scope: ScopeQuery = None) -> MemoryOut:
    """One memory by id (404 when absent or outside the key's scope)."""
    principal, path = _scope(request, scope, "query")
    memory = await _service(request).get(path, memory_id)
    if memory is None:
        raise _not_found(memory_id)
    return memory_out(memory, principal.scope)


@router.delete(
    "/memories/{memory_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_NOT_FOUND,
)
async def delete_memory(memory_id: str, request: Request, scope: ScopeQuery = None) -> Response:
    """Delete one memory and every link to it (404 when absent or outside the scope)."""
    _, path = _scope(request, scope, "query")
    if not await _service(request).delete(path, memory_id):
        raise _not_found(memory_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/memories", response_model=MemoriesOut)
async def list_memories(
    request: Request,
    where: Annotated[str | None, Query(
        description="A JSON filter object (see POST /v1/search), URL-encoded.")] = None,
    limit: Annotated[
        int | None,
        Query(ge=1, description="Page size: at most the service's max_list_limit; "
              "default 100 (or max_list_limit when smaller)."),
    ] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    scope: ScopeQuery = None,
) -> Response:
    """The scope's memories in insertion order, optionally filtered, one page."""
    principal, path = _scope(request, scope, "query")
    service = _service(request)
    if limit is None:
        limit = min(DEFAULT_PAGE, service.limits.max_list_limit)
    service.limits.check_list_limit(limit, ("limit",))
    memories = await service.list(path, _where_query(request, where), limit, offset)
    return await _json_off_loop(
        lambda: MemoriesOut(memories=[memory_out(m, principal.scope) for m in memories])
    )


@router.get("/state", response_model=StateOut)
async def get_state(request: Request, scope: ScopeQuery = None) -> StateOut:
    """The scope's affective state: core affect, momentum and mood."""
    _, path = _scope(request, scope, "query")
    return state_out(await _service(request).state(path))


@router.put("/state/affect", response_model=StateOut, responses=_JSON_BODY)
async def put_affect(body: StateAffectIn, request: Request) -> StateOut:
    """Feed an observed affect into the scope's state; momentum and mood follow."""
    _, path = _scope(request, body.scope, "body")
    state = await _service(request).set_affect(path, body.core_affect())
    return state_out(state)
