"""PostgresStore errors and schemas: redacted DSNs, refused and migrated schemas, dropped
connections, the README example.

The server is started by the ``pg_server`` fixture (tests/conftest.py,
tests/support/pg_server.py) on a free 127.0.0.1 port; each module gets its own database.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from psycopg import sql  # noqa: E402

from emotional_memory.models import Memory  # noqa: E402
from emotional_memory.stores.postgres import (  # noqa: E402
    SCHEMA_VERSION,
    PostgresStore,
    PostgresStoreError,
    redact_dsn,
)
from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore  # noqa: E402
from support.banks import assert_same_bank, random_memories  # noqa: E402
from support.engine_ops import op_engine  # noqa: E402
from support.paths import README  # noqa: E402
from support.pg_store import _new_table  # noqa: E402
from support.states import moved_state  # noqa: E402

# ----------------------------------------------------------------- errors


def _with_password(dsn: str, password: str) -> str:
    scheme, rest = dsn.split("://", 1)
    user = rest.split(":", 1)[0]
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[1]}"


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://u:s3cr3t@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert redact_dsn("host=h password=s3cr3t dbname=d") == "host=h password=*** dbname=d"
    assert redact_dsn("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert redact_dsn("postgresql://h/d?password=s3cr3t&x=1") == "postgresql://h/d?password=***&x=1"
    assert redact_dsn("postgresql://u@h/d") == "postgresql://u@h/d"


def test_an_unreachable_server_names_the_redacted_dsn() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://someone:hunter2hunter2@127.0.0.1:{port}/nodb"
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore(dsn, connect_timeout=2)
    text = str(info.value)
    assert "hunter2" not in text and "someone:***@127.0.0.1" in text
    assert "hunter2" not in repr(info.value.__cause__) if info.value.__cause__ else True


def test_a_bad_dsn_and_a_wrong_password_name_the_redacted_dsn(pg_dsn: str) -> None:
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore("host=127.0.0.1 password=hunter2hunter2 nonsense_option=1")
    assert "hunter2" not in str(info.value) and "password=***" in str(info.value)
    wrong = _with_password(pg_dsn, "hunter2hunter2")
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore(wrong, connect_timeout=5)
    assert "hunter2" not in str(info.value) and ":***@" in str(info.value)
    with pytest.raises(PostgresStoreError):
        PostgresAffectiveStateStore(wrong)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"connect_timeout": -5}, ValueError), ({"connect_timeout": 0}, ValueError),
        ({"connect_timeout": float("nan")}, ValueError),
        ({"connect_timeout": float("inf")}, ValueError),
        ({"connect_timeout": "5"}, ValueError), ({"connect_timeout": None}, ValueError),
        ({"connect_timeout": True}, ValueError),
        ({"dsn": None}, TypeError), ({"dsn": b"postgresql://x"}, TypeError),
    ],
)
def test_a_state_store_refuses_a_bad_option_by_name_before_connecting(
    pg_dsn: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """The state store's own connection options are checked as PostgresStore's are:
    a negative or zero timeout was quietly 1 s, NaN/inf/None/str raised int()'s words
    naming nothing, and a DSN of another type an AttributeError; no table is made."""
    table = _new_table()
    options = {"dsn": pg_dsn, **kwargs}
    name = next(iter(kwargs))
    with pytest.raises(error, match=name):
        PostgresAffectiveStateStore(options.pop("dsn"), table=table, **options)
    with psycopg.connect(pg_dsn) as conn:
        made = conn.execute("SELECT to_regclass(%s)", (f"{table}_state",)).fetchone()
    assert made == (None,)


def test_a_foreign_or_newer_schema_is_refused_before_anything_is_written(pg_dsn: str) -> None:
    table = _new_table()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_memories (id int, other text)")
    with pytest.raises(PostgresStoreError, match="not written by"):
        PostgresStore(pg_dsn, table=table)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s",
            (f"{table}%",))}
        assert tables == {f"{table}_memories"}  # no meta table was added
        newer = _new_table()
        PostgresStore(pg_dsn, table=newer).close()
        conn.execute(f"UPDATE {newer}_meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(PostgresStoreError, match="version '99'"):
        PostgresStore(pg_dsn, table=newer)


def test_a_foreign_state_table_is_refused_and_left_as_it_was(pg_dsn: str) -> None:
    """A ``{table}_state`` that the state store did not make (another layout, no
    primary key on ``key``, a view) is refused by name, on its own connection and
    through ``from_store``; its rows are not touched (a long ``key`` stays as it
    was: no digest migration)."""
    long_key = "k" * 3000
    for ddl in ("CREATE TABLE {t}_state (key text PRIMARY KEY, value int)",
                "CREATE TABLE {t}_state (key text, snapshot jsonb, snapshot_json text, "
                "updated_at timestamptz)",
                "CREATE VIEW {t}_state AS SELECT 'k'::text AS key"):
        table = _new_table()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(ddl.format(t=table))
            if "value int" in ddl:
                conn.execute(f"INSERT INTO {table}_state VALUES (%s, 1)", (long_key,))
        with pytest.raises(PostgresStoreError, match=f"{table}_state.*not made by"):
            PostgresAffectiveStateStore(pg_dsn, table=table)
        with PostgresStore(pg_dsn, table=table) as store, \
                pytest.raises(PostgresStoreError, match=f"{table}_state.*not made by"):
            PostgresAffectiveStateStore.from_store(store)
        if "value int" in ddl:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                rows = conn.execute(f"SELECT key, value FROM {table}_state").fetchall()
            assert rows == [(long_key, 1)]


def test_state_stores_opened_at_once_on_a_fresh_table_all_open(pg_dsn: str) -> None:
    """Workers starting together (own connections and ``from_store``) each create the
    state table if missing: they take turns, none fails on the others' CREATE."""
    import threading

    for _ in range(3):
        table = _new_table()
        start = threading.Barrier(6)
        failed: list[BaseException] = []

        def open_one(shared: bool, table: str = table, start: threading.Barrier = start,
                     failed: list[BaseException] = failed) -> None:
            start.wait()
            try:
                if shared:
                    with PostgresStore(pg_dsn, table=table) as store:
                        PostgresAffectiveStateStore.from_store(store).close()
                else:
                    PostgresAffectiveStateStore(pg_dsn, table=table).close()
            except BaseException as exc:
                failed.append(exc)

        threads = [threading.Thread(target=open_one, args=(i % 3 == 0,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failed == []


def test_stores_of_several_tables_opened_at_once_on_a_fresh_database_all_open(
    pg_server: Any,
) -> None:
    """Several tables' stores opening together on a database without the vector
    extension each create it if missing: they take turns, none fails on another's
    CREATE EXTENSION."""
    import threading
    import uuid

    name = f"fresh_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_server.dsn(name)
    start = threading.Barrier(4)
    failed: list[BaseException] = []

    def open_one(table: str) -> None:
        start.wait()
        try:
            PostgresStore(dsn, table=table).close()
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=open_one, args=(f"t{i}",)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failed == []
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_an_older_schema_is_migrated_in_one_transaction(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package whose schema moved on (here: pretend the next version adds a column)
    migrates a table of the current version on open, all in one transaction: a
    failing migration leaves the table at its version, untouched."""
    import emotional_memory.stores.postgres.schema as pg_module

    now, later = str(SCHEMA_VERSION), str(SCHEMA_VERSION + 1)
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as old:
        (m,) = random_memories(2, 1, 0)
        old.save(m)
    monkeypatch.setattr(pg_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(pg_module, "_MIGRATIONS", {SCHEMA_VERSION: (
        f"ALTER TABLE {table}_memories ADD COLUMN note text",
        "SELECT 1/0",  # fails: nothing of this migration may stay
    )})
    with pytest.raises(PostgresStoreError, match="division by zero"):
        PostgresStore(pg_dsn, table=table)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'").fetchone() == (now,)
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = %s "
            "AND column_name = 'note'", (f"{table}_memories",)).fetchone() == (0,)
    monkeypatch.setattr(pg_module, "_MIGRATIONS", {SCHEMA_VERSION: (
        f"ALTER TABLE {table}_memories ADD COLUMN note text",
    )})
    with PostgresStore(pg_dsn, table=table) as migrated:
        assert migrated.list_all() == [m]
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'").fetchone() == (later,)


def test_a_version_4_table_keeps_combining_marks_inside_its_tokens(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 4 split words at combining marks ("हिन्दी" -> four one-letter terms);
    opening such a table rewrites the rows whose content is not ASCII (more than one
    migration batch), after which searches and statistics equal the in-memory
    store's, and the ASCII rows are left as they were."""
    import re

    import emotional_memory.stores.postgres.schema as pg_module
    from emotional_memory import InMemoryStore
    from emotional_memory._bank import LexicalQuery
    from emotional_memory.lexical import fold, query_terms

    texts = ["हिन्दी भाषा सीखना", "كَتَبَ الدَّرْسَ", "plain ascii words", "मेरी बिल्ली"] * 4
    memories = [m.model_copy(update={"content": f"{w} {i}"}) for i, (w, m) in enumerate(zip(
        texts, random_memories(4, len(texts), 0), strict=True))]
    oracle, table = InMemoryStore(), _new_table()
    with PostgresStore(pg_dsn, table=table) as store:
        for m in memories:
            store.save(m)
            oracle.save(m)
    split = re.compile(r"[^\W_]+")  # version 4's tokenizer
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 4's rows
        t = f"{table}_memories"
        for m in memories:
            counts: dict[str, int] = {}
            for token in split.findall(fold(m.content)):
                counts[token] = counts.get(token, 0) + 1
            conn.execute(f"UPDATE {t} SET terms = %s, tfs = %s, doc_len = %s WHERE id = %s",
                         (list(counts), list(counts.values()), sum(counts.values()), m.id))
        ascii_before = conn.execute(
            f"SELECT id, terms, tfs, doc_len, xmin::text FROM {t} "
            "WHERE content LIKE 'plain%' ORDER BY id").fetchall()
        conn.execute(f"UPDATE {table}_meta SET value = '4' WHERE key = 'version'")
    monkeypatch.setattr(pg_module, "_STEM_BATCH", 5)  # several batches
    store = PostgresStore(pg_dsn, table=table)
    with store:
        for query in ("हिन्दी", "बिल्ली भाषा", "كَتَبَ", "plain words"):
            terms = query_terms(query)
            lex = LexicalQuery(terms, 6, 1.2, 0.75, statistics=True, analysis="none")
            now = memories[0].tag.timestamp
            got, want = (s.candidate_bank(None, None, now, lexical=lex) for s in (store, oracle))
            assert_same_bank(got, want)
            found = store.lexical_search(terms, 6, 1.2, 0.75, "none")
            assert found and found == oracle.lexical_search(terms, 6, 1.2, 0.75, "none")
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'"
        ).fetchone() == (str(SCHEMA_VERSION),)
        assert conn.execute(  # not rewritten: the same row versions
            f"SELECT id, terms, tfs, doc_len, xmin::text FROM {table}_memories "
            "WHERE content LIKE 'plain%' ORDER BY id").fetchall() == ascii_before


def _repeatable(dsn: str) -> str:
    """``dsn`` on a server whose default isolation is REPEATABLE READ."""
    sep = "&" if "?" in dsn else "?"
    return dsn + sep + "options=-c%20default_transaction_isolation%3Drepeatable%5C%20read"


def _while_waiting(dsn: str, table: str, work: Any, meanwhile: Any) -> Any:
    """Run ``work()`` in a thread while this test holds the store's advisory lock;
    once it waits for the lock, run ``meanwhile(conn)`` (committed) and let it go.

    Returns:
        What ``work`` returned, or the exception it raised.
    """
    import threading

    from emotional_memory.stores.postgres.common import table_lock_key

    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:
            out.append(exc)

    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (table_lock_key(table),))
        waiting = threading.Thread(target=run)
        waiting.start()
        for _ in range(100):
            if holder.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                              "AND NOT granted").fetchone()[0]:
                break
            threading.Event().wait(0.1)
        else:
            raise AssertionError("the work never waited for the lock")
        meanwhile(holder)
        holder.execute("SELECT pg_advisory_unlock(%s)", (table_lock_key(table),))
        waiting.join(60)
    (result,) = out
    return result


def test_what_a_lock_waited_for_is_seen_under_repeatable_read(pg_dsn: str) -> None:
    """On a server whose default isolation is REPEATABLE READ, a transaction took its
    snapshot before waiting for the store's lock: a second opener of an old table read
    the old version and migrated again, a write rewrote a row changed meanwhile; both
    failed with "could not serialize access". The store's transactions read
    committed data (what they waited for)."""
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as store:
        (m,) = random_memories(2, 1, 0)
        store.save(m)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {table}_meta SET value = %s WHERE key = 'version'",
                     (str(SCHEMA_VERSION - 1),))
    opened = _while_waiting(
        pg_dsn, table, lambda: PostgresStore(_repeatable(pg_dsn), table=table),
        lambda conn: conn.execute(  # the first opener's migration, committed
            f"UPDATE {table}_meta SET value = %s WHERE key = 'version'",
            (str(SCHEMA_VERSION),)))
    assert isinstance(opened, PostgresStore), opened
    with opened:
        assert opened.list_all() == [m]
        changed = m.model_copy(update={"content": "rewritten"})
        saved = _while_waiting(
            pg_dsn, table, lambda: opened.save(changed),
            lambda conn: conn.execute(f"UPDATE {table}_memories SET content = 'other' "
                                      "WHERE id = %s", (m.id,)))
        assert saved is None, saved
        assert opened.get(m.id) == changed


def test_a_version_1_table_is_migrated_to_the_current_version(pg_dsn: str) -> None:
    """Version 1 (the first release of this store) had no ``{t}_unchanged`` check
    function and no links table; opening such a table adds both (version 2, the links
    filled from the link arrays; version 3: the trigger through the links table's
    primary key) in the opening transaction, and a retrieve's side effects then take
    the one-statement path."""
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as store:
        engine = op_engine(store)
        for i in range(4):
            engine.encode(f"harbour storm memory {i}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 1's layout
        conn.execute(f"DROP FUNCTION {table}_memories_unchanged(bigint, bigint)")
        conn.execute(f"DROP TABLE {table}_links")
        conn.execute(f"DROP FUNCTION {table}_memories_track_links() CASCADE")  # triggers
        conn.execute(f"UPDATE {table}_meta SET value = '1' WHERE key = 'version'")
    with PostgresStore(pg_dsn, table=table) as store:
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute(
                f"SELECT value FROM {table}_meta WHERE key = 'version'"
            ).fetchone() == (str(SCHEMA_VERSION),)
            assert conn.execute(
                "SELECT count(*) FROM pg_proc WHERE proname = %s",
                (f"{table}_memories_unchanged",)).fetchone() == (1,)
            # the links table, filled from the link arrays
            pairs = set(conn.execute(f"SELECT target, source FROM {table}_links").fetchall())
            assert pairs == {
                (target, seq) for seq, targets in conn.execute(
                    f"SELECT seq, link_targets FROM {table}_memories").fetchall()
                for target in targets
            }
            assert pairs
        engine = op_engine(store)
        before = {m.id: m.tag.retrieval_count for m in store.list_all()}
        got = engine.retrieve("harbour storm", top_k=2)
        after = {m.id: m.tag.retrieval_count for m in store.list_all()}
        assert after == {mid: n + (mid in {m.id for m in got}) for mid, n in before.items()}


def test_a_dropped_connection_names_the_dsn_and_half_writes_nothing(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, table=_new_table(), min_connections=1, max_connections=1)
    a, b, c = random_memories(9, 3, 0)
    store.save(a)
    with pytest.raises(PostgresStoreError) as info, store.transaction():
        store.save(b)
        assert store.get(b.id) == b  # the transaction is open on the server
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"  # the store's only connection
            )
        store.save(c)
    password = pg_dsn.split(":")[2].split("@")[0]
    assert password not in str(info.value) and ":***@" in str(info.value)
    assert store.list_all() == [a]  # the pool replaced the dropped connection
    store.close()


def test_a_state_store_with_its_own_connection_reconnects_after_a_drop(pg_dsn: str) -> None:
    """A ``PostgresAffectiveStateStore(dsn)`` whose connection the server dropped fails
    that call (DSN redacted), then connects again, for its scoped twins too."""
    state = PostgresAffectiveStateStore(pg_dsn, key="k", table=_new_table())
    twin = state.scoped(("alice",))
    state.save(moved_state(0.1))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"  # the state store's connection
        )
    with pytest.raises(PostgresStoreError) as info:
        state.load()
    password = pg_dsn.split(":")[2].split("@")[0]
    assert password not in str(info.value) and ":***@" in str(info.value)
    assert state.load() == moved_state(0.1)
    twin.save(moved_state(0.2))
    assert twin.load() == moved_state(0.2) and state.load() == moved_state(0.1)
    state.close()
    with pytest.raises(ValueError, match="closed"):
        twin.load()


def test_the_readme_example_runs(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README "Production: PostgreSQL": the example runs as written (twice: the second
    run reopens the table and the persisted state)."""
    import re

    text = README.read_text(encoding="utf-8")
    section = text.split("## Production: PostgreSQL", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    monkeypatch.setenv("EMOTIONAL_MEMORY_DSN", pg_dsn)
    for _ in range(2):
        exec(code, {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["['The launch slipped again and the team is exhausted']"] * 2
    with PostgresStore(pg_dsn, table="agent_memory") as store:
        assert len(store) == 2


def test_a_version_3_table_gets_its_rows_stems(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 3 kept the plain terms only; opening such a table adds every row's stems
    (more rows than one migration batch), after which a stemmed search and its
    statistics equal the in-memory store's."""
    import emotional_memory.stores.postgres.schema as pg_module
    from emotional_memory import InMemoryStore
    from emotional_memory._bank import LexicalQuery
    from emotional_memory.lexical import query_terms

    table = _new_table()
    memories = [m.model_copy(update={"content": f"{w} {i}"}) for i, (w, m) in enumerate(zip(
        ["running late", "the runner runs", "meetings ran long", "quiet tea"] * 5,
        random_memories(4, 20, 0), strict=True))]
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=table) as store:
        for m in memories:
            store.save(m)
            oracle.save(m)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 3's rows
        t = f"{table}_memories"
        conn.execute(
            f"UPDATE {t} SET terms = ARRAY(SELECT x FROM unnest(terms) WITH ORDINALITY "
            "AS u(x, i) WHERE x NOT LIKE '~%' ORDER BY i), tfs = ARRAY(SELECT f FROM "
            "unnest(terms, tfs) WITH ORDINALITY AS u(x, f, i) WHERE x NOT LIKE '~%' "
            "ORDER BY i)")
        assert conn.execute(f"SELECT count(*) FROM {t} WHERE "
                            "array_to_string(terms, ' ') LIKE '%~%'").fetchone() == (0,)
        # version 3's tokenizer split a decomposed accent ("cafe" + U+0301 -> "cafe"):
        # its doc_len counted the pieces, which the migration must recount
        conn.execute(f"UPDATE {t} SET doc_len = doc_len + 3 WHERE id = %s", (memories[0].id,))
        conn.execute(f"UPDATE {table}_meta SET value = '3' WHERE key = 'version'")
    monkeypatch.setattr(pg_module, "_STEM_BATCH", 7)  # three batches
    store = PostgresStore(pg_dsn, table=table)
    with store:
        terms = query_terms("runs and meeting running", analysis="english")
        lex = LexicalQuery(terms, 5, 1.2, 0.75, statistics=True, analysis="english")
        now = memories[0].tag.timestamp
        got, want = (s.candidate_bank(None, None, now, lexical=lex) for s in (store, oracle))
        assert_same_bank(got, want)
        assert float(np.asarray(got.lexical.df).max()) > 0
        assert float(np.asarray(got.lexical.avg_length)) == float(
            np.asarray(want.lexical.avg_length))  # every row's length recounted
        assert store.lexical_search(terms, 5, 1.2, 0.75, "english") == oracle.lexical_search(
            terms, 5, 1.2, 0.75, "english")
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'"
        ).fetchone() == (str(pg_module.SCHEMA_VERSION),)


@pytest.mark.parametrize(
    ("assignment", "value", "message"),
    [
        ("metadata_json = %s", "[" * 10_000 + "]" * 10_000, "metadata nests too deeply"),
        ("metadata_json = %s", "[1]", "metadata is a list, not a JSON object"),
        ("metadata_json = %s", "{not json", "metadata is not JSON"),
        ("tagi[1] = %s", 10**18, "tagi holds a time outside"),
        ("tagi = %s", [1, 2], "tagi holds 2 values"),
        ("expires_us = %s", 10**18, "expires_at 1000000000000000000 is out of range"),
        ("whole = %s", "[" * 10_000 + "]" * 10_000, "whole: the stored memory nests too deeply"),
        ("whole = %s", '{"id": 1}', "whole: .*validation error"),
        ("scope = %s", ["team", None], "scope .* is not a list of non-empty strings"),
        ("scope = %s", ["team", ""], "scope .* is not a list of non-empty strings"),
    ],
)
def test_a_hand_edited_row_names_its_memory_and_field(
    pg_dsn: str, assignment: str, value: object, message: str
) -> None:
    # it used to give a raw RecursionError / OverflowError / IndexError on every read,
    # or a non-object as the memory's metadata
    table = _new_table()
    memories = random_memories(4, 3, 0)
    with PostgresStore(pg_dsn, table=table) as store:
        for m in memories:
            store.save(m)
    bad = memories[1].id
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {table}_memories SET {assignment} WHERE id = %s", (value, bad))
    with PostgresStore(pg_dsn, table=table) as store:
        expected = f"memory '{bad}' has an invalid row: {message}"
        with pytest.raises(ValueError, match=expected):
            store.get(bad)
        with pytest.raises(ValueError, match=expected):
            store.list_all()
        assert store.get(memories[0].id) == memories[0]


def test_a_closed_store_and_its_views_refuse_every_call_alike(pg_dsn: str) -> None:
    """After ``close()`` (twice: idempotent) the store and every view made from it
    before say they are closed and refuse reads and writes with the same
    ``ValueError`` (a view does not reach for the closed pool)."""
    from emotional_memory.stores.base import Selection

    memory, other = random_memories(4, 2, 0)
    store = PostgresStore(pg_dsn, table=_new_table())
    store.save(memory)
    views = [store.selected(Selection(scope=("a",))),
             store.selected(Selection(expired=True))]
    store.close()
    store.close()
    for s in (store, *views):
        assert s.closed
        for call in (s.list_all, lambda s=s: len(s), lambda s=s: s.get(memory.id),
                     lambda s=s: s.search_by_embedding([1.0, 0.0, 0.0, 0.0], 2),
                     lambda s=s: s.save(other)):
            with pytest.raises(ValueError, match="closed"):
                call()


def test_a_pool_whose_connections_stay_busy_answers_pool_busy(pg_dsn: str) -> None:
    """With every pooled connection held by another thread's transaction past the
    pool's wait, a call fails with ``PoolBusy`` (a ``StoreBusyError`` naming the
    redacted DSN), having done nothing; once the connection is back it goes on."""
    import threading

    from emotional_memory.interfaces import StoreBusyError
    from emotional_memory.stores.postgres import PoolBusy

    memory, other = random_memories(4, 2, 0)
    with PostgresStore(pg_dsn, table=_new_table(), max_connections=1) as store:
        store.save(memory)
        store._pool.timeout = 0.2  # the pool's wait, short for the test
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.transaction():
                store.get(memory.id)
                held.set()
                release.wait(30)

        thread = threading.Thread(target=hold)
        thread.start()
        try:
            assert held.wait(30)
            for call in (lambda: store.save(other), store.list_all):
                with pytest.raises(PoolBusy) as info:
                    call()
                assert isinstance(info.value, StoreBusyError)
                assert ":***@" in str(info.value)
        finally:
            release.set()
            thread.join()
        assert store.list_all() == [memory]


def _save_while_the_pool_is_held(store: PostgresStore, memory: Memory, other: Memory) -> float:
    """Save ``other`` while another thread holds the store's one connection for
    ``OUTAGE_WAIT_S + 1.5`` s (the pool's wait set past it); the seconds it took."""
    import threading
    import time

    from emotional_memory.stores.postgres.common import OUTAGE_WAIT_S

    store._pool.timeout = OUTAGE_WAIT_S + 6.0
    held = threading.Event()

    def hold() -> None:
        with store.transaction():
            store.get(memory.id)
            held.set()
            time.sleep(OUTAGE_WAIT_S + 1.5)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30)
        started = time.monotonic()
        store.save(other)
        return time.monotonic() - started
    finally:
        thread.join()


def test_a_busy_pool_is_waited_for_past_the_outage_probe(pg_dsn: str) -> None:
    """A call short of a connection tries a new one after ``OUTAGE_WAIT_S`` (to tell
    an outage fast); the database answering, it waits the rest of the pool's wait
    and is served when a connection comes free, neither refused as unreachable nor
    as busy."""
    from emotional_memory.stores.postgres.common import OUTAGE_WAIT_S

    memory, other = random_memories(4, 2, 0)
    with PostgresStore(pg_dsn, table=_new_table(), max_connections=1) as store:
        store.save(memory)
        waited = _save_while_the_pool_is_held(store, memory, other)
        assert waited > OUTAGE_WAIT_S
        assert sorted(m.id for m in store.list_all()) == sorted([memory.id, other.id])


def test_a_busy_pool_at_the_roles_connection_limit_is_waited_for(pg_dsn: str) -> None:
    """The outage probe after ``OUTAGE_WAIT_S`` opens a new connection: a database
    that answers it "too many connections" (a role's or the server's limit reached,
    by this very pool) is busy, not unreachable. It was told 'cannot be reached' two
    seconds into the wait, though its connection came free well within the pool's."""
    import uuid

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    role = f"limited_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    dbname = conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} CONNECTION LIMIT 1").format(
            sql.Identifier(role), sql.Literal(password)))
        admin.execute(sql.SQL("GRANT ALL ON DATABASE {} TO {}").format(
            sql.Identifier(dbname), sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT ALL ON SCHEMA public TO {}").format(sql.Identifier(role)))
    dsn = make_conninfo(pg_dsn, user=role, password=password)
    memory, other = random_memories(4, 2, 0)
    with PostgresStore(dsn, table=_new_table(), min_connections=1, max_connections=1) as store:
        store.save(memory)
        _save_while_the_pool_is_held(store, memory, other)
        assert not store._shared.outage
        assert sorted(m.id for m in store.list_all()) == sorted([memory.id, other.id])
