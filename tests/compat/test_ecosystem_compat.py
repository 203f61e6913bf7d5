"""What code written for the original 0.18.1 sees of the optional modules:
the Qdrant point ids, the root and ``integrations`` name lists (still lazy), install
hints, LLM clamping (tests/appraisal/test_appraisal.py) and the ``make_httpx_llm`` client surface.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from types import SimpleNamespace
from typing import Any, ClassVar
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory._extras import install_hint, installed
from emotional_memory.llm_http import OpenAICompatibleLLMConfig, make_httpx_llm

# --------------------------------------------------------------------------- Qdrant ids


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_uuid_for_is_the_originals_point_id(memory_id: str) -> None:
    from emotional_memory.stores.vectordb.qdrant import _point_id, _uuid_for

    # oracle: the original names uuid5 in the OID namespace of the memory id
    expected = str(uuid.uuid5(uuid.NAMESPACE_OID, memory_id))
    assert _uuid_for(memory_id) == expected == _point_id(memory_id)


def test_uuid_for_known_values_of_the_original() -> None:
    from emotional_memory.stores.vectordb.qdrant import _uuid_for

    # values printed by emotional-memory 0.18.1's own _uuid_for
    assert _uuid_for("abc") == "7697a46f-b283-5da3-8e7c-62c11c03dd9e"
    assert _uuid_for("") == "0a68eb57-c88a-5f34-9e9d-27f85e68af4f"


def test_qdrant_store_attributes_of_the_original(tmp_path: Any) -> None:
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    from emotional_memory.stores.qdrant import QdrantStore
    from support.memories import basic_memory as mem

    store = QdrantStore(collection_name="col")
    assert store._collection_name == "col" and not store._collection_ready
    assert repr(store) == "QdrantStore(':memory:', collection='col', count=0)"
    store.save(mem("a", [1.0, 0.0, 0.0]))
    assert store._collection_ready and store._dim == 3
    assert "count=1" in repr(store)
    store.close()
    assert "count=closed" in repr(store)


# --------------------------------------------------------------------------- names

OPTIONAL_NAMES = {
    "QdrantStore": "qdrant_client",
    "ChromaStore": "chromadb",
    "RedisAffectiveStateStore": "redis",
    "EmotionalMemoryMem0Backend": None,
    "messages_to_content": None,
    "EmotionalMemoryChatHistory": "langchain_core",
    "recommended_conversation_policy": "langchain_core",
    "store_all_messages": "langchain_core",
}


def _run(script: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_root_lists_installed_integrations_and_stays_lazy() -> None:
    got = _run(
        "import json, sys, emotional_memory as em\n"
        "names = list(em.__all__); d = dir(em)\n"
        "loaded = sorted(m for m in ('qdrant_client', 'chromadb', 'redis', 'langchain_core',"
        " 'jax', 'pydantic') if m in sys.modules)\n"
        "print(json.dumps([names, d, loaded]))"
    )
    names, listed, loaded = got
    assert loaded == []  # reading __all__ and dir() imports nothing optional
    for name, package in OPTIONAL_NAMES.items():
        assert name in listed
        assert (name in names) == (package is None or installed(package))
    assert len(names) == len(set(names))
    for name in names:  # every listed name resolves
        assert getattr(em, name) is not None


def test_root_hides_a_missing_extra_and_names_both_distributions() -> None:
    got = _run(
        "import json, sys\n"
        "sys.modules['qdrant_client'] = None\n"
        "sys.modules['langchain_core'] = None\n"
        "import emotional_memory as em\n"
        "try:\n"
        "    em.QdrantStore\n"
        "    err = None\n"
        "except ImportError as exc:\n"
        "    err = str(exc)\n"
        "print(json.dumps([list(em.__all__), 'QdrantStore' in dir(em), err]))"
    )
    names, in_dir, err = got
    assert "QdrantStore" not in names and "EmotionalMemoryChatHistory" not in names
    assert "EmotionalMemoryMem0Backend" in names and in_dir
    assert "emotional-memory-jax[qdrant]" in err and "emotional-memory[qdrant]" in err


def test_integrations_hide_langchain_names_when_it_is_missing() -> None:
    got = _run(
        "import json, sys\n"
        "for m in ('langchain_core', 'langchain_core.chat_history', 'langchain_core.messages'):\n"
        "    sys.modules[m] = None\n"
        "import emotional_memory.integrations as i\n"
        "try:\n"
        "    i.recommended_conversation_policy\n"
        "    err = None\n"
        "except ImportError as exc:\n"
        "    err = str(exc)\n"
        "print(json.dumps([i.__all__, err]))"
    )
    names, err = got
    assert names == ["EmotionalMemoryMem0Backend", "messages_to_content"]
    assert "emotional-memory[langchain]" in err and "emotional-memory-jax[langchain]" in err


def test_langchain_module_names_its_extra_when_it_is_missing() -> None:
    """The README's import, ``from emotional_memory.integrations.langchain import ...``,
    without langchain-core: an ImportError naming the extra, not a bare
    ``No module named 'langchain_core'``."""
    got = _run(
        "import json, sys\n"
        "sys.modules['langchain_core'] = None\n"
        "try:\n"
        "    from emotional_memory.integrations.langchain import EmotionalMemoryRetriever\n"
        "    err = None\n"
        "except ImportError as exc:\n"
        "    err = [type(exc).__name__, str(exc)]\n"
        "print(json.dumps(err))"
    )
    assert got is not None
    kind, err = got
    assert kind == "ImportError" and "langchain-core" in err
    assert "emotional-memory-jax[langchain]" in err and "emotional-memory[langchain]" in err


def test_install_hint_and_installed() -> None:
    hint = install_hint("chroma")
    assert "pip install 'emotional-memory-jax[chroma]'" in hint
    assert "'emotional-memory[chroma]'" in hint
    assert installed("json") and not installed("no_such_package_xyz")
    with patch.dict(sys.modules, {"json": None}):
        assert not installed("json")


# --------------------------------------------------------------------------- httpx


def test_make_httpx_llm_needs_only_the_client_surface_the_original_uses() -> None:
    """An ``httpx`` offering what the original calls (``Client(headers=, timeout=)`` with a
    float timeout, ``post``, ``close``) is enough."""
    seen: dict[str, Any] = {}

    class Response:
        status_code = 200
        text = "{}"
        headers: ClassVar[dict[str, str]] = {}

        def json(self) -> Any:
            return {"choices": [{"message": {"content": "hello"}}]}

    class Client:
        def __init__(self, *, headers: dict[str, str], timeout: float) -> None:
            seen.update(headers=headers, timeout=timeout)

        def post(self, url: str, *, json: dict[str, Any]) -> Response:
            seen.update(url=url, payload=json)
            return Response()

        def close(self) -> None:
            seen["closed"] = True

    fake = SimpleNamespace(Client=Client, HTTPError=Exception, HTTPStatusError=Exception)
    config = OpenAICompatibleLLMConfig(
        api_key="k", base_url="https://example.invalid/v1", model="m", timeout_seconds=4.5
    )
    with patch.dict(sys.modules, {"httpx": fake}):
        llm = make_httpx_llm(config)
        assert llm("hi", {}) == "hello"
        llm.close()  # type: ignore[attr-defined]
    assert seen["timeout"] == 4.5 and seen["closed"] is True
    assert seen["url"] == "https://example.invalid/v1/chat/completions"
    assert seen["headers"]["Authorization"] == "Bearer k"


# --------------------------------------------------------------------------- SQLite


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), max_size=40))
def test_pack_embedding_is_little_endian_float32(values: list[float]) -> None:
    import struct

    from emotional_memory.stores.sqlite.schema import _pack_embedding, _unpack_embedding

    blob = _pack_embedding(values)
    # oracle: the standard library's own little-endian float32 packing
    assert blob == struct.pack(f"<{len(values)}f", *values)
    assert _unpack_embedding(blob) == values


def test_unpack_embedding_rejects_a_torn_blob() -> None:
    from emotional_memory.stores.sqlite.schema import _unpack_embedding

    with pytest.raises(ValueError, match="multiple of 4"):
        _unpack_embedding(b"\x00" * 6)


def test_sqlite_errors_are_value_errors_and_the_originals_sqlite3_errors() -> None:
    import sqlite3

    from emotional_memory.stores.sqlite import SQLiteStore
    from support.memories import basic_memory as mem

    store = SQLiteStore(":memory:")
    first = mem("a", [1.0, 0.0])
    store.save(first)
    before = store.list_all()
    wider = [1.0, 0.0, 0.5]
    for op, memory in (
        (store.save, mem("b", wider)),
        (store.update, first.model_copy(update={"embedding": wider})),
    ):
        for catch in (ValueError, sqlite3.OperationalError):
            with pytest.raises(catch, match="dimension mismatch"):
                op(memory)
    assert store.list_all() == before  # nothing changed
    assert repr(store) == "SQLiteStore(':memory:', count=1)"
    store.close()
    assert repr(store) == "SQLiteStore(':memory:', count=closed)"
    for catch in (ValueError, sqlite3.ProgrammingError):
        with pytest.raises(catch, match="closed"):
            store.get(first.id)


def test_integrations_submodules_are_attributes_of_the_package_as_in_the_original() -> None:
    """The original imported both submodules with the package: after
    ``import emotional_memory.integrations as i``, ``i.mem0`` and ``i.langchain`` are
    modules (pinned from a run of 0.18.1; was an AttributeError here). Without
    langchain-core the original has no ``langchain`` attribute (``hasattr`` is False)."""
    got = _run(
        "import json, sys\n"
        "import emotional_memory.integrations as i\n"
        "lazy = 'langchain_core' not in sys.modules\n"
        "print(json.dumps([lazy, i.mem0.EmotionalMemoryMem0Backend.__name__,\n"
        "                  i.langchain.EmotionalMemoryChatHistory.__name__,\n"
        "                  hasattr(i, 'mem0'), hasattr(i, 'langchain')]))"
    )
    assert got == [True, "EmotionalMemoryMem0Backend", "EmotionalMemoryChatHistory", True, True]
    missing = _run(
        "import json, sys\n"
        "sys.modules['langchain_core'] = None\n"
        "import emotional_memory.integrations as i\n"
        "try:\n"
        "    i.langchain\n"
        "    err = None\n"
        "except AttributeError as exc:\n"
        "    err = str(exc)\n"
        "print(json.dumps([hasattr(i, 'mem0'), hasattr(i, 'langchain'), err]))"
    )
    assert missing is not None
    has_mem0, has_langchain, err = missing
    assert (has_mem0, has_langchain) == (True, False)
    assert "emotional-memory-jax[langchain]" in err
