"""The MCP server: tools ``remember``, ``recall``, ``forget``, ``mood``, ``set_mood``.

Built with the official ``mcp`` SDK (``mcp.server.mcpserver.MCPServer``). Each tool
is one service call in the caller's scope and answers with text an LLM reads plus
structured content (with a published output schema). Over HTTP (mounted at ``/mcp``
by :mod:`emotional_memory.server.app`) the scope is the API key's, found on the HTTP
request the auth middleware authenticated; over stdio (``emotional-memory mcp
--scope alice``) it is fixed at start.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from emotional_memory.interfaces import StoredStateError, StoreTimeoutError
from emotional_memory.mood import MoodField
from emotional_memory.server.keys import PRINCIPAL_KEY, Principal
from emotional_memory.server.openapi import filter_limits_text
from emotional_memory.server.schemas import (
    AffectIn,
    FewUnknown,
    MemoryOut,
    MoodChange,
    PositiveInt,
    RememberOut,
    ResultOut,
    StateOut,
    mood_change,
    publish_uncalibrated,
    remember_out,
    result_out,
    state_out,
)
from emotional_memory.server.service import (
    BUSY_DETAIL,
    BatchItem,
    MemoryService,
    database_busy,
    timeout_detail,
)

__all__ = [
    "ForgetOut",
    "MoodOut",
    "RecallOut",
    "RememberOut",
    "build_mcp",
    "fixed_principal",
    "http_principal",
]

logger = logging.getLogger("emotional_memory.server")

PrincipalOf = Callable[[Context], Principal]
_WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False)


class RecallOut(BaseModel):
    """What ``recall`` found, best first."""

    results: list[ResultOut]


def _relevance(p: float | None) -> str:
    """``", relevance 0.83"`` with a calibrated probability, else nothing."""
    return "" if p is None else f", relevance {p:.2f}"


class MoodOut(StateOut):
    """The affective state and how the mood moved since the previous ``mood`` call."""

    previous_mood: MoodField = Field(
        description="The mood at the previous mood call (at first: when the server "
        "opened this scope)."
    )
    mood_change: MoodChange


class ForgetOut(BaseModel):
    """What ``forget`` deleted."""

    id: str
    deleted: bool


def http_principal(ctx: Context) -> Principal:
    """The principal the auth middleware attached to the HTTP request of this call.

    Args:
        ctx: the tool call's context.

    Returns:
        The principal.

    Raises:
        ToolError: the call did not come through the authenticated HTTP app.
    """
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    principal = scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None
    if not isinstance(principal, Principal):
        raise ToolError("this call is not authenticated")
    return principal


def fixed_principal(path: tuple[str, ...]) -> PrincipalOf:
    """A resolver that puts every call in scope ``path`` (the stdio server).

    Args:
        path: the scope path.

    Returns:
        The resolver.
    """
    principal = Principal(path, "stdio")
    return lambda ctx: principal


def _strict(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not declare (a misspelt or unsupported
    argument would otherwise be dropped without a word; many are one error, see
    :func:`~emotional_memory.server.schemas.few_unknown`) and listing that in its schema."""
    base = tool.fn_metadata.arg_model
    strict = cast("type[BaseModel]", type(base.__name__, (base, FewUnknown), {
        "__module__": base.__module__,
        "model_config": ConfigDict(**{**base.model_config, "extra": "forbid"}),
    }))
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    return tool.model_copy(update={"fn_metadata": metadata,
                                   "parameters": strict.model_json_schema(by_alias=True)})


def _text(content: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=content)],
        structured_content=structured.model_dump(mode="json"),
    )


async def _guarded(call: Awaitable[Any]) -> Any:
    """Await a service call; bad input, or a store's statement timeout (REST's 503),
    -> a ToolError the model can read (not an unexpected crash)."""
    try:
        return await call
    except StoredStateError as exc:  # the server's data, not the caller's input
        logger.error("%s in an MCP tool call: %s", type(exc).__name__, exc)
        raise ToolError("internal error: this scope's stored state is unreadable "
                        "(see the server's log)") from None
    except (TypeError, ValueError) as exc:
        raise ToolError(f"invalid input: {exc}") from None
    except StoreTimeoutError as exc:
        logger.warning("%s in an MCP tool call", type(exc).__name__)
        raise ToolError(timeout_detail(exc)) from None
    except sqlite3.OperationalError as exc:
        if not database_busy(exc):
            raise
        logger.warning("database busy in an MCP tool call")
        raise ToolError(BUSY_DETAIL) from None


def _affect(m: MemoryOut) -> str:
    a = m.affect
    label = f", {m.emotion.name}" if m.emotion is not None else ""
    return f"valence {a.valence:+.2f}, arousal {a.arousal:.2f}, dominance {a.dominance:.2f}{label}"


def _moved(change: MoodChange) -> str:
    return f"valence {change.valence:+.3f}, arousal {change.arousal:+.3f}"


_SOURCES = {"given": "as given", "text": "estimated from the text", "current": "the current affect"}


def _remember_tool(service: MemoryService, principal_of: PrincipalOf, felt: str) -> Tool:
    """The ``remember`` tool: store a memory, its affect given or estimated."""

    async def remember(
        ctx: Context,
        content: Annotated[str, Field(description="The text to remember.", min_length=1)],
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description='Optional JSON object stored with it (e.g. {"topic": "work"}).'),
        ] = None,
        affect: Annotated[
            AffectIn | None,
            Field(
                description="Optional: how it felt, {valence -1..1, arousal 0..1, "
                "dominance 0..1 (default 0.5)}; overrides the estimate."
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RememberOut]:
        principal = principal_of(ctx)
        item = BatchItem(content, metadata, affect.core_affect() if affect is not None else None)
        done = await _guarded(service.remember_felt(principal.scope, item))
        out = remember_out(done.memory, principal.scope, done.affect_source,
                           done.mood_before, done.mood_after)
        m = out.mood_after
        return _text(
            f"Remembered (id {out.id}; {_affect(out)}, {_SOURCES[out.affect_source]}): "
            f"{out.content}\nMood now valence {m.valence:+.3f}, arousal {m.arousal:.3f} "
            f"(moved {_moved(out.mood_change)}).",
            out,
        )

    return _strict(Tool.from_function(
        remember,
        description=(
            "Store a memory: a short, self-contained statement worth recalling later "
            f"(a fact, an event, a preference); {felt}. Returns the new memory with its "
            "id, its affect and emotion, and how the mood moved."
        ),
        annotations=_WRITES,
    ))


def _recall_tool(service: MemoryService, principal_of: PrincipalOf) -> Tool:
    """The ``recall`` tool: the memories most relevant to a query."""

    async def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What to look for, in natural language.")],
        top_k: Annotated[
            PositiveInt | None,
            Field(
                description="How many memories at most (the service's max_top_k bounds it); "
                "default 5 (or max_top_k when smaller).",
            ),
        ] = None,
        where: Annotated[
            dict[str, Any] | None,
            Field(
                description="Optional filter: {field: value} or {field: {$op: value}}; "
                "ops $eq $ne $gt $gte $lt $lte $in $nin $exists, and $and / $or lists of "
                "clauses. Fields: metadata keys (dotted paths) and the built-ins "
                "timestamp (RFC 3339 with offset), valence, arousal, dominance, "
                "retrieval_count (numbers) and emotion (a label)."
            ),
        ] = None,
        min_relevance: Annotated[
            float | None,
            Field(
                description="Optional: drop memories whose calibrated relevance "
                "probability is below this (0 to 1); 'No memories found.' when none "
                "is relevant enough. Needs a fitted config.",
                ge=0.0,
                le=1.0,
                strict=True,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RecallOut]:
        principal = principal_of(ctx)
        k = service.default_top_k if top_k is None else top_k
        found = await _guarded(service.search(principal.scope, query, k, where, min_relevance))
        out = RecallOut(results=[result_out(f, principal.scope, False) for f in found])
        if not out.results:
            return _text("No memories found.", out)
        lines = [
            f"{i}. [{r.score:.3f}{_relevance(r.relevance)}] {r.content} (id {r.id}; {_affect(r)})"
            for i, r in enumerate(out.results, start=1)
        ]
        return _text("\n".join(lines), out)

    tool = _strict(Tool.from_function(
        recall,
        description=(
            "Find the memories most relevant to a query, ranked by meaning and by the "
            "current mood. Optional `where` filters on metadata or built-ins, e.g. "
            '{"topic": "work"} or {"valence": {"$lt": 0}}. Returns each memory\'s id, '
            "text and score."
        ),
        annotations=_WRITES,
    ))
    # the service's bound, published as the REST schema publishes it (the check
    # itself stays the service's, whose error names the limit and its flag)
    top_k = next(s for s in tool.parameters["properties"]["top_k"]["anyOf"]
                 if s.get("type") == "integer")
    top_k["maximum"] = service.limits.max_top_k
    where = tool.parameters["properties"]["where"]
    where["description"] = f"{where['description']} {filter_limits_text(service.limits)}"
    if not service.calibrated:
        publish_uncalibrated(tool.parameters["properties"]["min_relevance"])
    return tool


def _forget_tool(service: MemoryService, principal_of: PrincipalOf) -> Tool:
    """The ``forget`` tool: delete a memory by id."""

    async def forget(
        ctx: Context,
        id: Annotated[str, Field(description="The memory's id.")],
    ) -> Annotated[CallToolResult, ForgetOut]:
        principal = principal_of(ctx)
        if not await _guarded(service.delete(principal.scope, id)):
            raise ToolError(f"no memory with id {id!r} in this scope")
        return _text(f"Forgot memory {id}.", ForgetOut(id=id, deleted=True))

    return _strict(Tool.from_function(
        forget,
        description="Delete a memory by its id (as returned by remember or recall).",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True),
    ))


def _mood_tool(service: MemoryService, principal_of: PrincipalOf) -> Tool:
    """The ``mood`` tool: the affective state and how the mood moved."""

    async def mood(ctx: Context) -> Annotated[CallToolResult, MoodOut]:
        principal = principal_of(ctx)
        state, previous = await _guarded(service.mood_change(principal.scope))
        out = MoodOut(
            **state_out(state).model_dump(),
            previous_mood=previous,
            mood_change=mood_change(previous, state.mood),
        )
        m = out.mood
        return _text(
            f"Mood: valence {m.valence:+.3f}, arousal {m.arousal:.3f}, dominance "
            f"{m.dominance:.3f}; moved {_moved(out.mood_change)} since the last check "
            f"(was valence {previous.valence:+.3f}). Current affect valence "
            f"{out.core_affect.valence:+.2f}, arousal {out.core_affect.arousal:.2f}.",
            out,
        )

    return _strict(Tool.from_function(
        mood,
        description=(
            "The current affective state: core affect (valence -1..1, arousal 0..1, "
            "dominance 0..1), its momentum, the slower-moving mood, and how the mood "
            "moved since the previous mood call."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=False),
    ))


def _set_mood_tool(service: MemoryService, principal_of: PrincipalOf) -> Tool:
    """The ``set_mood`` tool: record how the user feels now."""

    async def set_mood(
        ctx: Context,
        valence: Annotated[
            float,
            Field(description="Pleasantness, -1..1.", ge=-1.0, le=1.0,
                  allow_inf_nan=False, strict=True),
        ],
        arousal: Annotated[
            float,
            Field(description="Activation, 0..1.", ge=0.0, le=1.0,
                  allow_inf_nan=False, strict=True),
        ],
        dominance: Annotated[
            float,
            Field(description="Sense of control, 0..1.", ge=0.0, le=1.0,
                  allow_inf_nan=False, strict=True),
        ] = 0.5,
    ) -> Annotated[CallToolResult, StateOut]:
        from emotional_memory.affect import CoreAffect

        principal = principal_of(ctx)
        affect = CoreAffect(valence=valence, arousal=arousal, dominance=dominance)
        out = state_out(await _guarded(service.set_affect(principal.scope, affect)))
        m = out.mood
        return _text(
            f"Affect set to valence {valence:+.2f}, arousal {arousal:.2f}; mood now valence "
            f"{m.valence:+.2f}, arousal {m.arousal:.2f}.",
            out,
        )

    return _strict(Tool.from_function(
        set_mood,
        description=(
            "Record how the user feels now; the mood follows gradually and colours what "
            "is remembered and recalled next. valence: -1 (very unpleasant) to 1 (very "
            "pleasant); arousal: 0 (calm) to 1 (excited)."
        ),
        annotations=_WRITES,
    ))


def build_mcp(service: MemoryService, principal_of: PrincipalOf) -> MCPServer:
    """The MCP server with the memory tools.

    Args:
        service: the service the tools call.
        principal_of: finds the caller's principal from a tool call's context.

    Returns:
        The configured ``MCPServer`` (serve it over stdio, or mount its streamable
        HTTP app).
    """
    felt = (
        "how it felt (valence, arousal, dominance) is estimated from the text unless "
        "`affect` is given"
        if service.rates_text
        else "it is stored with `affect` when given, else with the current affective state"
    )
    tools = [
        _remember_tool(service, principal_of, felt),
        _recall_tool(service, principal_of),
        _forget_tool(service, principal_of),
        _mood_tool(service, principal_of),
        _set_mood_tool(service, principal_of),
    ]
    return MCPServer(
        "emotional-memory",
        instructions=(
            "Long-term memory with feelings. Call `remember` to store something worth "
            f"keeping ({felt}; each memory moves the mood), `recall` to find memories "
            "relevant to a question (ranked by meaning and by the current mood), `forget` "
            "to delete one by id, `mood` to read the current affective state and how the "
            "mood moved, and `set_mood` when the user's feelings change."
        ),
        log_level="WARNING",
        tools=tools,
    )
