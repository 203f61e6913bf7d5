"""The README's integration examples run as written (against local servers where needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.readme_blocks import integration_examples

EXAMPLES = integration_examples()


def _run(key: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(EXAMPLES[key], namespace)
    return namespace


def test_every_integration_has_an_example() -> None:
    assert set(EXAMPLES) == {
        "emotional_memory.state_stores.redis",
        "emotional_memory.llm_http",
        "emotional_memory.telemetry",
        "emotional_memory.integrations.langchain",
        "emotional_memory.integrations.mem0",
        "emotional_memory.stores.qdrant",
        "emotional_memory.visualization",
    }


def test_llm_example(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("httpx", reason="the llm extra is not installed")
    from support.fake_openai import FakeOpenAI

    server = FakeOpenAI()
    server.default_content = json.dumps(
        {
            "novelty": 0.7,
            "goal_relevance": -0.8,
            "coping_potential": 0.2,
            "norm_congruence": 0.0,
            "self_relevance": 0.9,
        }
    )
    try:
        monkeypatch.setenv("EMOTIONAL_MEMORY_LLM_API_KEY", "k")
        monkeypatch.setenv("EMOTIONAL_MEMORY_LLM_BASE_URL", server.base_url)
        _run("emotional_memory.llm_http")
    finally:
        server.close()
    assert "novelty=0.7" in capsys.readouterr().out
    assert len(server.requests) == 1


def test_telemetry_logging_example(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    logger = logging.getLogger("emotional_memory")
    before = (list(logger.handlers), logger.level)
    try:
        _run("emotional_memory.telemetry")
        logging.getLogger("emotional_memory.x").info("hello")
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert json.loads(line)["message"] == "hello"
    finally:
        logger.handlers[:] = before[0]
        logger.setLevel(before[1])


def test_langchain_example(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    ns = _run("emotional_memory.integrations.langchain")
    assert "I finally passed my driving test!" in capsys.readouterr().out
    assert len(ns["engine"].list_all()) == 1 and len(ns["history"].messages) == 2


def test_mem0_example(capsys: pytest.CaptureFixture[str]) -> None:
    _run("emotional_memory.integrations.mem0")
    assert "I love hiking in the Alps" in capsys.readouterr().out


def test_vector_store_example(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    _run("emotional_memory.stores.qdrant")
    out = capsys.readouterr().out
    assert "QdrantStore ['The concert was unforgettable']" in out
    assert "ChromaStore ['The concert was unforgettable']" in out


def test_visualization_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib", reason="the viz extra is not installed")
    monkeypatch.chdir(tmp_path)
    _run("emotional_memory.visualization")
    assert (tmp_path / "circumplex.png").stat().st_size > 5_000
    assert (tmp_path / "why.png").stat().st_size > 5_000
