"""``encode_batch`` appraises its events in a bounded thread pool, as the original does.

The original's batch runs its appraisals (blocking LLM calls, typically) in a pool of
``config.appraisal_max_concurrency`` threads and uses the answers in order; the result
equals appraising one event after another. These tests check the pool's bound, the
order of the answers (against an engine appraising serially), the first failure being
raised with nothing stored, and that each call sees the caller's context variables.
"""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
)
from emotional_memory.embedders import HashingEmbedder

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEXTS = [
    "I was furious about the broken build",
    "a happy day at the lake",
    "the exam results scared me",
    "we won the final, what a thrill",
    "a quiet afternoon reading",
    "my friend betrayed my trust",
]


class _CountingAppraiser:
    """Keyword appraisal that records how many calls run at once.

    With ``barrier`` set, each call waits there first: a batch appraising serially
    breaks it (``BrokenBarrierError`` after its timeout).
    """

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        self.barrier = barrier
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.calls = 0

    def appraise(self, text: str, context: Any = None) -> Any:
        with self.lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        try:
            if self.barrier is not None:
                self.barrier.wait()
            return KeywordAppraisalEngine().appraise(text, context)
        finally:
            with self.lock:
                self.inside -= 1


def _engine(appraiser: Any, concurrency: int = 8) -> EmotionalMemory:
    return EmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), appraiser,
        EmotionalMemoryConfig(appraisal_max_concurrency=concurrency), clock=lambda: NOW,
    )


def _fingerprint(engine: EmotionalMemory) -> list[Any]:
    """Each stored memory's content, tag and links, in insertion order."""
    return [
        (m.content, m.tag.appraisal, m.tag.core_affect, m.tag.mood_snapshot, m.tag.momentum,
         [(link.target_id in {x.id for x in engine.list_all()}, link.strength)
          for link in m.tag.resonance_links])
        for m in engine.list_all()
    ]


def test_a_batch_appraises_its_events_in_parallel_with_the_serial_result() -> None:
    # before: one appraisal after another, so three calls never met at the barrier
    appraiser = _CountingAppraiser(threading.Barrier(3, timeout=20))
    engine = _engine(appraiser, concurrency=3)
    got = engine.encode_batch(TEXTS[:3])
    serial = _engine(KeywordAppraisalEngine(), concurrency=1)
    want = serial.encode_batch(TEXTS[:3])
    assert appraiser.most == 3
    assert [m.tag.appraisal for m in got] == [m.tag.appraisal for m in want]
    assert _fingerprint(engine) == _fingerprint(serial)
    assert engine.get_state().mood == serial.get_state().mood


@pytest.mark.parametrize("concurrency", [1, 2, 4])
def test_the_pool_never_exceeds_appraisal_max_concurrency(concurrency: int) -> None:
    appraiser = _CountingAppraiser(
        threading.Barrier(concurrency, timeout=20) if concurrency > 1 else None
    )
    engine = _engine(appraiser, concurrency=concurrency)
    engine.encode_batch(TEXTS[:4])
    assert appraiser.calls == 4
    assert appraiser.most == concurrency


def test_events_with_a_given_affect_are_not_appraised() -> None:
    appraiser = _CountingAppraiser()
    engine = _engine(appraiser)
    given = CoreAffect(valence=0.5, arousal=0.5)
    engine.encode_batch(TEXTS[:4], affect=[given, None, given, None])
    assert appraiser.calls == 2


class _FailingAppraiser(_CountingAppraiser):
    def appraise(self, text: str, context: Any = None) -> Any:
        answer = super().appraise(text, context)
        if "scared" in text or "betrayed" in text:
            raise RuntimeError(f"appraisal failed for {text!r}")
        return answer


def test_the_first_failure_in_order_is_raised_and_nothing_is_stored() -> None:
    engine = _engine(_FailingAppraiser())
    before = engine.get_state()
    with pytest.raises(RuntimeError, match="scared"):
        engine.encode_batch(TEXTS)
    assert engine.list_all() == []
    assert engine.get_state() == before


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


class _ContextAppraiser(_CountingAppraiser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def appraise(self, text: str, context: Any = None) -> Any:
        with self.lock:
            self.seen.append(_REQUEST.get())
        return super().appraise(text, context)


def test_each_appraisal_runs_in_the_callers_context() -> None:
    appraiser = _ContextAppraiser()
    engine = _engine(appraiser)
    token = _REQUEST.set("request-42")
    try:
        engine.encode_batch(TEXTS)
    finally:
        _REQUEST.reset(token)
    assert appraiser.seen == ["request-42"] * len(TEXTS)


class _AsyncKeywords:
    """An async appraisal engine (keyword appraisal) that notes its largest overlap."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0

    async def appraise(self, text: str, context: Any = None) -> Any:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            await asyncio.sleep(0.05)
            return KeywordAppraisalEngine().appraise(text, context)
        finally:
            self.inside -= 1


def test_an_async_engine_with_given_affects_appraises_the_rest_through_its_loop() -> None:
    # with some affects given the async engine hands the batch to the sync engine,
    # whose pool threads reach the async appraiser through the caller's loop (the
    # loop travels in each call's copied context)
    given = CoreAffect(valence=-0.6, arousal=0.7)
    affects = [None, given, None, None, given, None]
    appraiser = _AsyncKeywords()
    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), appraiser, clock=lambda: NOW
    )
    asyncio.run(aengine.encode_batch(TEXTS, affect=affects))
    serial = _engine(KeywordAppraisalEngine(), concurrency=1)
    serial.encode_batch(TEXTS, affect=affects)
    assert _fingerprint(aengine.engine) == _fingerprint(serial)
    assert appraiser.most > 1


class _CallingBackAppraiser(_CountingAppraiser):
    """An appraiser that reads the engine it appraises for (its memories so far)."""

    engine: EmotionalMemory

    def appraise(self, text: str, context: Any = None) -> Any:
        self.engine.list_all()
        return super().appraise(text, context)


def test_an_appraiser_may_call_the_engine_back() -> None:
    # the batch held its scope's turn (re-entrant for its own thread only) while the
    # pool's threads appraised: an appraiser reading the engine waited for ever
    appraiser = _CallingBackAppraiser()
    engine = _engine(appraiser)
    appraiser.engine = engine
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(engine.encode_batch(TEXTS)),
                              daemon=True)
    worker.start()
    worker.join(60)
    assert done and len(done[0]) == len(TEXTS), "encode_batch hung"
    assert appraiser.calls == len(TEXTS)


def test_a_batch_in_an_atexit_handler_is_appraised_serially(tmp_path: Path) -> None:
    # once the interpreter's shutdown began no pool may start a thread: the batch
    # raised "cannot schedule new futures after interpreter shutdown"
    script = tmp_path / "atexit_batch.py"
    script.write_text(
        "import atexit\n"
        "from emotional_memory import EmotionalMemory, InMemoryStore, KeywordAppraisalEngine\n"
        "from emotional_memory.embedders import HashingEmbedder\n"
        "engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16),\n"
        "                         KeywordAppraisalEngine())\n"
        "def flush():\n"
        "    stored = engine.encode_batch(['a happy day', 'I was furious', 'so scared'])\n"
        "    print('stored', len(stored), flush=True)\n"
        "atexit.register(flush)\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert "stored 3" in done.stdout, done.stderr[-2000:]


class _WrongAnswer:
    """An appraiser answering with something that is no appraisal (a label), as a
    hand-written LLM wrapper might."""

    def appraise(self, text: str, context: Any = None) -> Any:
        return "joy"


class _NoAffect:
    """An appraisal-like answer whose projection gives nothing (a missing return)."""

    def to_core_affect(self) -> Any:
        return None


class _NoAffectAnswer:
    def appraise(self, text: str, context: Any = None) -> Any:
        return _NoAffect()


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize(("appraiser", "message"), [
    (_WrongAnswer, r"appraisal_engine.appraise must return an AppraisalVector.*got str"),
    # a projection giving None read as "no event affect": encode stored the memory with
    # the current state's affect, query appraisal retrieved as without one, the gated
    # retrieval failed with "'NoneType' object has no attribute 'valence'"
    (_NoAffectAnswer, r"_NoAffect.to_core_affect must return a CoreAffect, got NoneType"),
])
def test_an_appraisal_the_engine_cannot_use_is_a_type_error_naming_it(
    concurrency: int, appraiser: type, message: str
) -> None:
    config = EmotionalMemoryConfig(appraisal_max_concurrency=concurrency)
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), appraiser(),
                             config=config)
    state = engine.get_state().model_dump()
    with pytest.raises(TypeError, match=message):
        engine.encode(TEXTS[0])
    with pytest.raises(TypeError, match=message):
        engine.encode_batch(TEXTS)
    with pytest.raises(TypeError, match=message):
        engine.retrieve_with_query_appraisal("the lake", top_k=1)
    with pytest.raises(TypeError, match=message):
        engine.retrieve_query_gated("the lake", top_k=1)
    assert len(engine.store) == 0 and engine.get_state().model_dump() == state
    dual = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), appraiser(),
                           config=EmotionalMemoryConfig(dual_path_encoding=True))
    memory = dual.encode(TEXTS[1])  # deferred: nothing appraised yet
    with pytest.raises(TypeError, match=message):
        dual.elaborate(memory.id)
    assert dual.store.get(memory.id).tag.pending_appraisal  # left as it was


def test_an_async_appraisal_that_is_no_appraisal_is_a_type_error_naming_it() -> None:
    class _AsyncWrong:
        async def appraise(self, text: str, context: Any = None) -> Any:
            return {"valence": 0.5}

    async def main() -> None:
        engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), _AsyncWrong())
        with pytest.raises(TypeError, match=r"appraisal_engine.appraise.*got dict"):
            await engine.encode_batch(TEXTS[:3])
        with pytest.raises(TypeError, match=r"appraisal_engine.appraise.*got dict"):
            await engine.encode(TEXTS[0])
        assert len(engine.engine.store) == 0

    asyncio.run(main())
