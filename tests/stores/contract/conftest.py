"""The one fixture of the contract suite: ``backend``, over every memory-store backend.

A test takes ``backend`` and gets each of ``support.backends.STORES``; a module that
checks the engine over a store widens it to ``ENGINES`` (adding a plain protocol-only
store) and a persistence check narrows it to ``DURABLE``, both with
``pytest.mark.parametrize("backend", ..., indirect=True)``. The servers
(PostgreSQL, Chroma, Redis) are the session's, started on first use.

The affective-state stores have their own, smaller contract and fixture:
``state_backend``, over ``support.backends.STATE_STORES``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.backends import STATE_STORES, STORES, Backend, StateBackend, opened_backend


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Opens stores of the backend named by the parameter; closes them afterwards."""
    yield from opened_backend(request)


@pytest.fixture(params=STATE_STORES)
def state_backend(request: pytest.FixtureRequest) -> Iterator[StateBackend]:
    """Opens affective-state stores of the backend named by the parameter."""
    opened = StateBackend(request.param, request)
    try:
        yield opened
    finally:
        opened.close()
