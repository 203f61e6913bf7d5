"""Importing the package and its integration modules loads no optional library."""

from __future__ import annotations

import subprocess
import sys

OPTIONAL = (
    "qdrant_client",
    "chromadb",
    "redis",
    "langchain_core",
    "httpx",
    "opentelemetry",
    "matplotlib",
    "psycopg",
    "psycopg_pool",
    "pgvector",
)


def test_integration_modules_import_no_optional_library() -> None:
    script = f"""
import sys
import emotional_memory
from emotional_memory import EmotionalMemory, configure_logging
from emotional_memory.stores import ChromaStore, PostgresStore, QdrantStore
from emotional_memory.state_stores import PostgresAffectiveStateStore, RedisAffectiveStateStore
import emotional_memory.integrations, emotional_memory.integrations.mem0
import emotional_memory.llm_http, emotional_memory.telemetry, emotional_memory.visualization
print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip() == "[]"
