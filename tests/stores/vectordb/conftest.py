"""The vector-database tests' fixture: ``backend``, over Qdrant and Chroma."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.backends import Backend, opened_backend


@pytest.fixture(params=["qdrant", "chroma"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Qdrant (local mode) or Chroma (the session's ``chroma run`` server) stores."""
    yield from opened_backend(request)
