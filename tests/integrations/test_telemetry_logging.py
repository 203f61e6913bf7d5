"""telemetry (OpenTelemetry SDK, in-memory exporter) and logging_config."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from emotional_memory import telemetry
from emotional_memory.logging_config import JsonFormatter, configure_logging

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer(telemetry.TRACER_NAME))
    yield exp
    provider.shutdown()


def test_span_recorded_with_attributes(exporter: InMemorySpanExporter) -> None:
    with telemetry.traced_span(
        "emotional_memory.test", {"n": 3, "ids": ["a", "b"], "skip": None, "obj": {1: 2}}
    ) as span:
        assert span is not None and span.is_recording()
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "emotional_memory.test"
    assert finished.instrumentation_scope.name == "emotional_memory"
    assert finished.attributes is not None
    assert dict(finished.attributes) == {"n": 3, "ids": ("a", "b"), "obj": "{1: 2}"}


def test_exception_recorded_and_reraised(exporter: InMemorySpanExporter) -> None:
    with pytest.raises(KeyError), telemetry.traced_span("emotional_memory.fail"):
        raise KeyError("missing")
    (finished,) = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.status.description == "'missing'"  # str(exc)
    assert [e.name for e in finished.events] == ["exception"]


def test_an_exception_that_cannot_be_shown_propagates_as_itself(
    exporter: InMemorySpanExporter,
) -> None:
    """Its ``str()`` raising made the span's recording raise a RuntimeError in its place:
    with tracing on, the caller caught another exception than without it."""

    class Unshowable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    @telemetry.traced("emotional_memory.t")
    def fail() -> None:
        raise Unshowable

    with pytest.raises(Unshowable):
        fail()
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "Unshowable"  # its type, when it has no message


def test_noop_without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_tracer", None)
    monkeypatch.setattr(telemetry, "_otel_unavailable", True)
    cm = telemetry.traced_span("x", {"a": 1})
    assert isinstance(cm, contextlib.nullcontext)
    with cm as span:
        assert span is None
    calls = []

    @telemetry.traced("y")
    def f(x: int) -> int:
        """Doc."""
        calls.append(x)
        return x + 1

    assert f(1) == 2 and calls == [1] and f.__doc__ == "Doc." and f.__name__ == "f"


def test_reset_tracer_cache_uses_global_api(monkeypatch: pytest.MonkeyPatch) -> None:
    telemetry._reset_tracer_cache()
    tracer = telemetry._get_tracer()
    assert tracer is not None  # the API's (proxy) tracer: follows the global provider
    telemetry._reset_tracer_cache()


def test_a_scoped_views_retrieve_span_counts_its_own_memories(
    exporter: InMemorySpanExporter,
) -> None:
    """``store_size`` was ``len(engine.store)``: a tenant's view reported the whole
    store's count (every tenant's memories) on its retrieval spans."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    em = EmotionalMemory(InMemoryStore(), HashingEmbedder())
    em.encode_batch(["root one", "root two"])
    alice = em.scoped("alice")
    alice.encode("alice's only memory")
    alice.retrieve("memory", top_k=1)
    alice.retrieve_with_explanations("memory", top_k=1)
    em.retrieve("memory", top_k=1)
    sizes = [(s.name, dict(s.attributes or {})["store_size"])
             for s in exporter.get_finished_spans() if "retrieve" in s.name]
    assert sizes == [("emotional_memory.retrieve", 1),
                     ("emotional_memory.retrieve_with_explanations", 1),
                     ("emotional_memory.retrieve", 3)]


def test_engine_emits_spans(exporter: InMemorySpanExporter) -> None:
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    em = EmotionalMemory(InMemoryStore(), HashingEmbedder())
    em.encode("We won the championship after a long season")
    em.encode_batch(["A quiet walk in the park", "The exam went badly", "Rain all day"])
    em.observe("The assistant said something kind")
    em.retrieve("championship", top_k=1)  # 4 memories > 1 * 3: store search
    em.retrieve_with_explanations("park", top_k=2)
    with contextlib.suppress(Exception):
        em.elaborate("no-such-id")
    em.prune(threshold=0.0)
    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    for name in (
        "encode",
        "encode_batch",
        "observe",
        "retrieve",
        "retrieve_with_explanations",
        "elaborate",
        "prune",
        "store.search_by_embedding",
    ):
        assert f"emotional_memory.{name}" in by_name, name
    assert len(by_name["emotional_memory.embed"]) >= 4  # encode, batch, two queries

    def attrs(name: str) -> dict[str, Any]:
        return dict(by_name[f"emotional_memory.{name}"][0].attributes or {})

    assert attrs("encode") == {"content_length": 43}
    assert attrs("encode_batch") == {"batch_size": 3}
    assert attrs("observe") == {"content_length": 33}
    assert attrs("retrieve") == {"query_length": 12, "top_k": 1, "store_size": 4}
    assert attrs("retrieve_with_explanations")["top_k"] == 2
    assert attrs("store.search_by_embedding") == {"limit": 3}
    assert attrs("elaborate") == {"memory_id": "no-such-id"}
    assert attrs("prune") == {"threshold": 0.0}
    by_id = {s.context.span_id: s for s in spans}
    # embed and store-search spans are children of the operation that did them
    parents = {
        (s.name, by_id[s.parent.span_id].name)
        for s in spans
        if s.parent is not None and s.parent.span_id in by_id
    }
    assert ("emotional_memory.embed", "emotional_memory.encode") in parents
    assert ("emotional_memory.embed", "emotional_memory.encode_batch") in parents
    assert ("emotional_memory.embed", "emotional_memory.retrieve") in parents
    assert (
        "emotional_memory.store.search_by_embedding",
        "emotional_memory.retrieve",
    ) in parents
    batch_embed = [
        s for s in by_name["emotional_memory.embed"] if s.attributes and "count" in s.attributes
    ]
    assert batch_embed and batch_embed[0].attributes is not None
    assert batch_embed[0].attributes["count"] == 3


def test_traced_skips_attributes_of_bad_input(exporter: InMemorySpanExporter) -> None:
    @telemetry.traced("emotional_memory.t", size=("items", len))
    def f(items: Any) -> int:
        return 1

    assert f(None) == 1 and f([1, 2]) == 1
    first, second = exporter.get_finished_spans()
    assert dict(first.attributes or {}) == {} and dict(second.attributes or {}) == {"size": 2}


def test_traced_async_span_covers_the_awaited_body(exporter: InMemorySpanExporter) -> None:
    import asyncio

    from opentelemetry import trace

    seen: list[Any] = []

    @telemetry.traced("emotional_memory.async", size=("items", len))
    async def f(items: list[int]) -> int:
        await asyncio.sleep(0)
        seen.append(trace.get_current_span())
        if not items:
            raise ValueError("empty")
        return len(items)

    assert inspect.iscoroutinefunction(f)  # frameworks await it only if so
    assert asyncio.run(f([1, 2])) == 2
    with pytest.raises(ValueError):
        asyncio.run(f([]))
    ok, failed = exporter.get_finished_spans()
    # the body ran inside the span (it used to end when the coroutine was created)
    assert seen[0].get_span_context().span_id == ok.context.span_id
    assert dict(ok.attributes or {}) == {"size": 2}
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]


def test_traced_async_without_opentelemetry_stays_a_coroutine_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    monkeypatch.setattr(telemetry, "_tracer", None)
    monkeypatch.setattr(telemetry, "_otel_unavailable", True)

    @telemetry.traced("y")
    async def f(x: int) -> int:
        return x + 1

    assert inspect.iscoroutinefunction(f) and asyncio.run(f(1)) == 2


def test_engine_error_marks_span(exporter: InMemorySpanExporter) -> None:
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    em = EmotionalMemory(InMemoryStore(), HashingEmbedder())
    with pytest.raises(TypeError):
        em.encode(123)  # type: ignore[arg-type]
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "emotional_memory.encode"]
    assert span.status.status_code is StatusCode.ERROR


def test_integers_beyond_int64_become_strings(exporter: InMemorySpanExporter) -> None:
    """OTLP holds int64 only: the exporter dropped such an attribute with a logged error."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    big = 2**63
    with telemetry.traced_span(
        "emotional_memory.test", {"n": big, "edge": big - 1, "low": -big, "ids": [1, big]}
    ):
        pass
    em = EmotionalMemory(InMemoryStore(), HashingEmbedder())
    em.encode("A day at the harbour")
    em.retrieve("harbour", top_k=10**30)  # accepted: more than the store holds
    first, *rest = exporter.get_finished_spans()
    assert dict(first.attributes or {}) == {
        "n": str(big), "edge": big - 1, "low": -big, "ids": str([1, big])
    }
    (retrieve,) = [s for s in rest if s.name == "emotional_memory.retrieve"]
    assert (retrieve.attributes or {})["top_k"] == str(10**30)


# ---------------------------------------------------------------- logging_config


@pytest.fixture
def clean_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("emotional_memory")
    before = (list(logger.handlers), logger.level)
    yield logger
    logger.handlers[:] = before[0]
    logger.setLevel(before[1])


def test_json_lines(clean_logger: logging.Logger) -> None:
    buf = io.StringIO()
    configure_logging("info", json_format=True, stream=buf)
    logging.getLogger("emotional_memory.engine").info("stored %d", 3, extra={"memory_id": "m1"})
    logging.getLogger("emotional_memory.engine").debug("hidden")
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("emotional_memory").exception("failed")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "stored 3" and first["level"] == "INFO"
    assert first["logger"] == "emotional_memory.engine" and first["memory_id"] == "m1"
    assert first["timestamp"].endswith("+00:00")
    assert "ValueError: bad" in second["exc_info"]


def test_env_level_and_no_duplicate_handlers(
    clean_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMOTIONAL_MEMORY_LOG_LEVEL", "debug")
    buf = io.StringIO()
    logger = configure_logging(stream=buf)
    assert logger.level == logging.DEBUG
    configure_logging(stream=buf)
    logging.getLogger("emotional_memory.x").debug("once")
    assert buf.getvalue().count("once") == 1
    assert " | emotional_memory.x | DEBUG | once" in buf.getvalue()
    monkeypatch.delenv("EMOTIONAL_MEMORY_LOG_LEVEL")
    assert configure_logging(stream=buf).level == logging.WARNING
    assert configure_logging(10, stream=buf).level == 10
    with pytest.raises(ValueError):
        configure_logging("LOUD", stream=buf)


def test_json_formatter_is_one_line() -> None:
    record = logging.makeLogRecord({"msg": "a\nb", "levelname": "INFO", "name": "n"})
    out = JsonFormatter().format(record)
    assert "\n" not in out and json.loads(out)["message"] == "a\nb"


def test_global_tracer_provider_set_after_import() -> None:
    """As the original documents: set the global provider, then engine calls emit spans."""
    import subprocess
    import sys

    script = """
import emotional_memory.engine  # imported (and telemetry cached) before the provider
from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import contextlib
from emotional_memory.telemetry import traced_span

em = EmotionalMemory(InMemoryStore(), HashingEmbedder())
em.encode("before the provider")
# no provider configured yet: spans would be dropped, so none is even started
print(isinstance(traced_span("x"), contextlib.nullcontext))
provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
em.encode("after the provider")
em.retrieve("provider", top_k=1)
print(isinstance(traced_span("x"), contextlib.nullcontext))
print(sorted({s.name for s in exporter.get_finished_spans()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    lines = out.strip().splitlines()
    assert lines[:2] == ["True", "False"]
    assert lines[2] == str(
        ["emotional_memory.embed", "emotional_memory.encode", "emotional_memory.retrieve"]
    )


def test_async_engine_emits_the_same_spans(exporter: InMemorySpanExporter) -> None:
    import asyncio

    from emotional_memory import AsyncEmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    async def main() -> None:
        em = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder())
        await em.encode("A long day at the harbour")
        await em.retrieve("harbour", top_k=1)

    asyncio.run(main())
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"emotional_memory.encode", "emotional_memory.retrieve"} <= names


def _strict_json(line: str) -> dict[str, Any]:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    out: dict[str, Any] = json.loads(line, parse_constant=refuse)
    return out


def test_json_lines_stay_json_for_awkward_extra_fields(
    clean_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN / inf, non-string keys and cycles neither break the line nor lose the record."""
    buf = io.StringIO()
    configure_logging("info", json_format=True, stream=buf)
    log = logging.getLogger("emotional_memory.engine")
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    log.info("scored", extra={"score": float("nan"), "limit": float("-inf"), "memory_id": "m1"})
    log.info("counts", extra={"counts": {(1, 2): 3}})
    log.info("loop", extra={"loop": cyclic})
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3, capsys.readouterr().err
    first, second, third = (_strict_json(line) for line in lines)
    assert first["message"] == "scored" and first["memory_id"] == "m1"
    assert first["score"] == "nan" and first["limit"] == "-inf"
    assert second["message"] == "counts" and second["counts"] == "{(1, 2): 3}"
    assert third["message"] == "loop" and isinstance(third["loop"], str)
    assert "Logging error" not in capsys.readouterr().err


def test_bad_level_in_the_environment_is_named(
    clean_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMOTIONAL_MEMORY_LOG_LEVEL", "LOUD")
    handlers = list(clean_logger.handlers)
    with pytest.raises(ValueError, match=r"EMOTIONAL_MEMORY_LOG_LEVEL.*'LOUD'"):
        configure_logging(stream=io.StringIO())
    assert clean_logger.handlers == handlers  # nothing changed
    with pytest.raises(ValueError, match=r"^unknown log level 'LOUD'$"):
        configure_logging("LOUD", stream=io.StringIO())  # an argument: no variable named


def test_json_extra_fields_never_replace_the_record_fields(clean_logger: logging.Logger) -> None:
    """``extra={"level": "db"}`` wrote "level": "db": a collector lost the severity."""
    buf = io.StringIO()
    configure_logging("info", json_format=True, stream=buf)
    extra = {"level": "db", "logger": "pool", "timestamp": 0, "memory_id": "m1"}
    logging.getLogger("emotional_memory.engine").error("disk full", extra=extra)
    line = _strict_json(buf.getvalue())
    assert line["level"] == "ERROR" and line["logger"] == "emotional_memory.engine"
    assert line["message"] == "disk full" and line["timestamp"].endswith("+00:00")
    assert line["extra_level"] == "db" and line["extra_logger"] == "pool"
    assert line["extra_timestamp"] == 0 and line["memory_id"] == "m1"
    buf.truncate(0)
    buf.seek(0)
    both = {"level": "db", "extra_level": "cache"}  # the prefixed name is taken too
    logging.getLogger("emotional_memory.engine").error("both", extra=both)
    values = sorted(v for k, v in _strict_json(buf.getvalue()).items() if "level" in k)
    assert values == ["ERROR", "cache", "db"]


def test_configure_logging_leaves_the_host_applications_handlers(
    clean_logger: logging.Logger,
) -> None:
    """Only the handler configure_logging installed is replaced on a second call."""
    host = logging.StreamHandler(io.StringIO())
    root_before = list(logging.getLogger().handlers)
    clean_logger.addHandler(host)
    ours = io.StringIO()
    configure_logging("info", stream=ours)
    configure_logging("info", json_format=True, stream=ours)
    assert host in clean_logger.handlers
    assert logging.getLogger().handlers == root_before
    logging.getLogger("emotional_memory.x").warning("seen")
    assert "seen" in host.stream.getvalue()
    assert ours.getvalue().count("seen") == 1
