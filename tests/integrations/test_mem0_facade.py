"""mem0 facade: mem0's argument forms, and bad input refused by name with nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import AsyncEmotionalMemory, EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend, messages_to_content

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _backend() -> EmotionalMemoryMem0Backend:
    return EmotionalMemoryMem0Backend(
        EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=lambda: NOW)
    )


def _view(m: EmotionalMemoryMem0Backend, user: str) -> EmotionalMemory:
    with m._user(user) as view:
        return view


def _untouched(m: EmotionalMemoryMem0Backend, before: dict[str, Any]) -> None:
    assert m.em.list_all() == [] and m.em.get_state().snapshot() == before


def test_add_takes_one_message_dict_as_mem0_does() -> None:
    one, listed = _backend(), _backend()
    message = {"role": "user", "content": "I love hiking in the Alps"}
    (a,) = one.add(message, user_id="alice", metadata={"k": 1})["results"]
    (b,) = listed.add([message], user_id="alice", metadata={"k": 1})["results"]
    assert a["memory"] == b["memory"] == "user: I love hiking in the Alps"
    got_one, got_listed = one.get(a["id"]), listed.get(b["id"])
    assert got_one is not None and got_listed is not None
    assert (
        got_one["metadata"]
        == got_listed["metadata"]
        == {"k": 1, "role": "user", "user_id": "alice"}
    )
    assert messages_to_content(message) == "user: I love hiking in the Alps"


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (None, "messages must be"),
        (42, "messages must be"),
        (b"hi", "messages must be"),
        ([{"content": "ok"}, "text"], r"messages\[1\] must be a dict"),
    ],
)
def test_add_refuses_bad_messages_by_name(messages: Any, named: str) -> None:
    m = _backend()
    before = m.em.get_state().snapshot()
    with pytest.raises(TypeError, match=named):
        m.add(messages, user_id="alice")
    _untouched(m, before)


@pytest.mark.parametrize("metadata", ["abc", [("k", 1)], 3])
def test_add_refuses_metadata_that_is_not_a_dict(metadata: Any) -> None:
    m = _backend()
    before = m.em.get_state().snapshot()
    with pytest.raises(TypeError, match="metadata must be a dict"):
        m.add("I got the job", user_id="alice", metadata=metadata)
    _untouched(m, before)


def _with_memories() -> EmotionalMemoryMem0Backend:
    m = _backend()
    m.add("Hiking in the Alps", user_id="alice", agent_id="a1", metadata={"topic": "trips"})
    m.add("A rainy day at the office", user_id="alice", agent_id="a2", metadata={"topic": "work"})
    m.add("Bob's own trip", user_id="bob", metadata={"topic": "trips"})
    return m


def test_get_all_takes_mem0_filters() -> None:
    m = _with_memories()
    got = m.get_all(user_id="alice", filters={"topic": "trips"})["results"]
    assert [r["memory"] for r in got] == ["Hiking in the Alps"]
    got = m.get_all(user_id="alice", agent_id="a2", filters={"topic": {"$in": ["trips", "work"]}})
    assert [r["memory"] for r in got["results"]] == ["A rainy day at the office"]
    everything = m.get_all(user_id="alice")["results"]
    assert m.get_all(user_id="alice", filters={})["results"] == everything


@pytest.mark.parametrize(
    ("call", "error", "named"),
    [
        (lambda m: m.get_all(user_id="alice", limit="3"), TypeError, "limit must be an int"),
        (lambda m: m.get_all(user_id="alice", limit=0), ValueError, "limit must be >= 1"),
        (lambda m: m.get_all(user_id="alice", limit=True), TypeError, "limit must be an int"),
        (lambda m: m.search("x", user_id="alice", limit=2.0), TypeError, "limit must be an int"),
        (lambda m: m.get_all(user_id="alice", filters="x"), TypeError, "filters must be a dict"),
        (lambda m: m.search("x", user_id="alice", filters=["k"]), TypeError, "filters must be"),
        (lambda m: m.get_all(user_id="alice", agent_id=1), TypeError, "agent_id must be a str"),
        (lambda m: m.search("x", run_id=""), ValueError, "run_id must be a non-empty"),
        (lambda m: m.delete_all(user_id="alice", agent_id=7), TypeError, "agent_id must be"),
        (lambda m: m.add("new", user_id="alice", agent_id=5), TypeError, "agent_id must be"),
        (lambda m: m.add("new", user_id="alice", run_id=""), ValueError, "run_id must be"),
        (lambda m: m.update(m.em.list_all()[0].id, 5), TypeError, "data must be a str, got int"),
    ],
)
def test_bad_arguments_are_named_and_change_nothing(call: Any, error: Any, named: str) -> None:
    m = _with_memories()
    before = [(x.id, x.content, x.metadata) for x in m.em.list_all()]
    states = {u: _view(m, u).get_state().snapshot() for u in ("alice", "bob")}
    with pytest.raises(error, match=named):
        call(m)
    assert [(x.id, x.content, x.metadata) for x in m.em.list_all()] == before
    assert {u: _view(m, u).get_state().snapshot() for u in ("alice", "bob")} == states


def test_get_all_and_repr_read_no_more_memories_than_they_return() -> None:
    """``get_all(limit=1)`` built every memory of the user and sliced; ``repr`` built
    every memory of the store to count them."""
    m = _with_memories()
    for i in range(20):
        m.add(f"note {i}", user_id="alice")
    built: list[int] = []

    def spy_on(owner: Any) -> None:
        original = owner.list_all

        def spy(*a: Any, **k: Any) -> Any:
            out = original(*a, **k)
            built.append(len(out))
            return out

        owner.list_all = spy

    spy_on(_view(m, "alice"))
    spy_on(m.em)
    got = m.get_all(user_id="alice", limit=1)["results"]
    assert [r["memory"] for r in got] == ["Hiking in the Alps"]
    assert built == [1]
    built.clear()
    assert repr(m) == "EmotionalMemoryMem0Backend(memories=23, default_user_id='default')"
    assert built == []


def test_reset_resets_the_moods_of_users_another_process_left(tmp_path: Any) -> None:
    """``reset()`` resets every user's affective state, also of users this backend
    object never served (a restarted process over the same files)."""
    from emotional_memory.affect import CoreAffect
    from emotional_memory.stores.sqlite import SQLiteStore
    from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

    def open_engine() -> EmotionalMemory:
        store = SQLiteStore(tmp_path / "m.db")
        return EmotionalMemory(store, HashingEmbedder(dim=32),
                               state_store=SQLiteAffectiveStateStore.from_store(store))

    first = EmotionalMemoryMem0Backend(open_engine())
    first.add("the storm broke the window", user_id="alice")
    first.em.scoped("alice").set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    first.close()
    restarted = EmotionalMemoryMem0Backend(open_engine())
    assert restarted.em.scoped("alice").get_state().core_affect.valence == pytest.approx(-0.8)
    restarted.reset()
    assert restarted.get_all(user_id="alice")["results"] == []
    restarted.close()
    again = open_engine()
    assert again.scoped("alice").get_state().core_affect.valence == 0.0
    again.close()


class _WordRater:
    """Affect from text by keyword: 'sad' texts negative, others positive (a test rater)."""

    def rate_affect(self, texts: Any) -> list[Any]:
        from emotional_memory import CoreAffect

        return [
            CoreAffect(valence=-0.8 if "sad" in t else 0.7, arousal=0.6, dominance=0.5)
            for t in texts
        ]


def _rated(max_user_views: int, state_store: Any) -> EmotionalMemoryMem0Backend:
    engine = EmotionalMemory(
        InMemoryStore(),
        HashingEmbedder(),
        clock=lambda: NOW,
        state_store=state_store,
        affect_from_text=_WordRater(),
    )
    return EmotionalMemoryMem0Backend(engine, max_user_views=max_user_views)


def _moods_after_many_users(m: EmotionalMemoryMem0Backend) -> dict[str, Any]:
    users = [f"user{i}" for i in range(7)]
    for round_ in range(3):
        for i, user in enumerate(users):
            text = "a sad day" if (i + round_) % 2 else "a bright day"
            m.add(f"{text} {round_}", user_id=user)
            m.search("day", user_id=user, limit=2)
    out = {}
    for user in users:
        with m._user(user) as view:
            out[user] = view.get_state().snapshot()
    return out


def test_user_views_are_bounded_with_a_state_store_and_moods_survive_eviction() -> None:
    from emotional_memory import InMemoryAffectiveStateStore

    bounded = _rated(2, InMemoryAffectiveStateStore())
    oracle = _rated(4096, InMemoryAffectiveStateStore())
    got, want = _moods_after_many_users(bounded), _moods_after_many_users(oracle)
    assert got == want
    assert len({str(s) for s in want.values()}) > 1  # the users' moods differ
    assert len(bounded._views) <= 2 and len(oracle._views) == 7


def test_without_a_state_store_every_user_view_is_kept() -> None:
    m = _rated(1, None)
    moods = _moods_after_many_users(m)
    assert len(m._views) == 7
    oracle = _rated(4096, None)
    assert _moods_after_many_users(oracle) == moods


def test_reset_reaches_the_moods_of_evicted_users_without_memories() -> None:
    from emotional_memory import InMemoryAffectiveStateStore

    m = _rated(1, InMemoryAffectiveStateStore())
    initial = m.em.scoped("ghost").get_state().snapshot()
    m.add("a sad loss", user_id="ghost")
    m.delete_all(user_id="ghost")  # no memory left, but a moved mood
    m.add("a bright day", user_id="other")  # evicts ghost's view
    assert "ghost" not in m._views
    assert m.em.scoped("ghost").get_state().snapshot() != initial
    m.reset()
    assert m.em.scoped("ghost").get_state().snapshot() == initial


@pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (True, TypeError), (1.5, TypeError)])
def test_max_user_views_is_checked_by_name(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_user_views"):
        EmotionalMemoryMem0Backend(
            EmotionalMemory(InMemoryStore(), HashingEmbedder()), max_user_views=bad
        )


def test_a_view_in_use_by_another_thread_is_not_dropped() -> None:
    from emotional_memory import InMemoryAffectiveStateStore

    m = _rated(1, InMemoryAffectiveStateStore())
    with m._user("busy") as busy:
        m.add("a bright day", user_id="other")
        m.add("a sad day", user_id="third")
        assert "busy" in m._views and m._views["busy"][0] is busy
    m.add("a bright day", user_id="other")
    assert "busy" not in m._views


@pytest.mark.parametrize("messages", ["", [], [{"role": "user", "content": ""}]])
@pytest.mark.parametrize("user_id", [5, "", ["alice"]])
def test_add_refuses_a_bad_user_even_with_nothing_to_store(messages: Any, user_id: Any) -> None:
    """A bad ``user_id`` was accepted silently when the messages held no content
    (``{"results": []}``), while ``agent_id`` / ``run_id`` were checked first."""
    m = _backend()
    with pytest.raises(ValueError, match="user_id must be a non-empty string"):
        m.add(messages, user_id=user_id)
    assert m.add(messages, user_id="alice") == {"results": []}
    assert m.em.list_all() == []


@pytest.mark.parametrize("em", [None, "engine", object()])
def test_the_backend_refuses_something_that_is_no_engine_by_name(em: Any) -> None:
    """Was an AttributeError ("'NoneType' object has no attribute 'state_store'")."""
    with pytest.raises(TypeError, match="em must be an EmotionalMemory"):
        EmotionalMemoryMem0Backend(em)


def test_the_backend_refuses_an_async_engine_by_name() -> None:
    """An AsyncEmotionalMemory (coroutine methods) failed with an AttributeError."""
    aengine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder())
    with pytest.raises(TypeError, match=r"AsyncEmotionalMemory.*\.engine"):
        EmotionalMemoryMem0Backend(aengine)  # type: ignore[arg-type]
