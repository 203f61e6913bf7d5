"""The memory service: REST and MCP over HTTP, API keys bound to scopes (extra ``[server]``).

``emotional-memory serve`` (:mod:`emotional_memory.server.cli`) serves
:func:`~emotional_memory.server.app.build_app`: the REST API under ``/v1``
(:mod:`~emotional_memory.server.rest`), MCP streamable HTTP at ``/mcp``
(:mod:`~emotional_memory.server.mcp_tools`), ``/healthz`` and ``/openapi.json``;
``emotional-memory mcp`` serves the same MCP tools over stdio. Each API key is bound
to a scope path (:mod:`~emotional_memory.server.keys`); every request runs in a
scoped view of one engine (:mod:`~emotional_memory.server.service`). Store URLs are
resolved by :func:`~emotional_memory.server.stores.open_store`.

Importing this package needs nothing beyond the library; the submodules ``app``,
``rest``, ``mcp_tools`` and ``cli``'s commands need the ``[server]`` extra.
"""

from emotional_memory.server.keys import KeyRing, Principal
from emotional_memory.server.stores import StoreURLError, open_store, redact_url

__all__ = ["KeyRing", "Principal", "StoreURLError", "open_store", "redact_url"]
