"""PostgreSQL backend: schema creation, checks and migrations"""

from __future__ import annotations

from typing import Any

from emotional_memory.stores.postgres.common import (
    _SCHEMA_NAME,
    MAX_HNSW_DIM,
    PostgresStoreError,
    lexical_columns,
    table_lock_key,
)
from emotional_memory.stores.postgres.core import _Core

__all__ = ["SCHEMA_VERSION"]

SCHEMA_VERSION = 5
"""The schema version this package writes; older ones are migrated on open."""

# The check a conditional write ends with: it fails the transaction (serialization
# failure, SQLSTATE 40001) when fewer rows than expected were still as read.
_UNCHANGED_FUNCTION = """CREATE FUNCTION {t}_unchanged(got bigint, want bigint)
RETURNS bigint LANGUAGE plpgsql AS $body$
BEGIN
    IF got <> want THEN
        RAISE EXCEPTION 'emotional_memory: % of % rows changed since they were read',
            want - got, want USING ERRCODE = '40001';
    END IF;
    RETURN got;
END
$body$"""

# The trigger function keeping ``{links}``: every statement finds its rows through the
# primary key (target, source), never by ``source`` alone (which would scan the whole
# links table once per written row: version 2's function did, so writing the links
# of a batch's neighbours slowed with the bank's size).
_TRACK_LINKS_FUNCTION = """CREATE OR REPLACE FUNCTION {t}_track_links() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM {links} WHERE target = ANY (OLD.link_targets) AND source = OLD.seq;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM {links} WHERE target = ANY (ARRAY(
            SELECT unnest(OLD.link_targets) EXCEPT SELECT unnest(NEW.link_targets)))
            AND source = OLD.seq;
        INSERT INTO {links} (target, source)
            SELECT x, NEW.seq FROM (SELECT unnest(NEW.link_targets)
                                    EXCEPT SELECT unnest(OLD.link_targets)) AS n(x)
            ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    INSERT INTO {links} (target, source)
        SELECT DISTINCT x, NEW.seq FROM unnest(NEW.link_targets) AS x
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$body$"""

# Who links to whom, kept by the server: ``{links}`` holds one row per (target id,
# source seq) of the memories' link arrays, maintained by triggers on every write
# that changes them, so a delete finds the memories linking to it through an index
# while the link arrays stay unindexed (writing links stays a HOT update that never
# touches the vector index).
_LINKS_STATEMENTS = (
    "CREATE TABLE {links} (target text NOT NULL, source bigint NOT NULL, "
    "PRIMARY KEY (target, source))",
    _TRACK_LINKS_FUNCTION.replace("CREATE OR REPLACE", "CREATE"),
    "CREATE TRIGGER {t}_links_insert AFTER INSERT ON {t} FOR EACH ROW "
    "WHEN (cardinality(NEW.link_targets) > 0) EXECUTE FUNCTION {t}_track_links()",
    "CREATE TRIGGER {t}_links_update AFTER UPDATE OF link_targets ON {t} FOR EACH ROW "
    "WHEN (OLD.link_targets IS DISTINCT FROM NEW.link_targets) "
    "EXECUTE FUNCTION {t}_track_links()",
    "CREATE TRIGGER {t}_links_delete AFTER DELETE ON {t} FOR EACH ROW "
    "WHEN (cardinality(OLD.link_targets) > 0) EXECUTE FUNCTION {t}_track_links()",
)

# Migrations: version -> statements taking the schema from that version to the next
# (``{t}``: the memories table, ``{meta}``: the meta table, ``{links}``: the links
# table). _ensure_schema applies them in one transaction.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: retrieval side effects written conditionally; the links table
    1: (
        _UNCHANGED_FUNCTION,
        *_LINKS_STATEMENTS,
        "INSERT INTO {links} (target, source) SELECT DISTINCT x, m.seq "
        "FROM {t} AS m, unnest(m.link_targets) AS x",
    ),
    # 3: the links trigger finds its rows through the links table's primary key
    2: (_TRACK_LINKS_FUNCTION,),
    # 4: the terms column also holds the tokens' stems (lexical_stemmer="english"),
    # added to the existing rows by _retokenize (computed here, in Python)
    3: (),
    # 5: a token keeps the combining marks inside it (Devanagari vowel signs, Arabic
    # harakat); _retokenize rewrites the rows whose content is not ASCII
    4: (),
}

_EXTENSION_LOCK = table_lock_key(" vector extension")
"""The advisory lock under which a new store's tables are created (any table: each
creation runs ``CREATE EXTENSION IF NOT EXISTS vector``). No table prefix has a
space, so no table's own lock shares its key."""

_STEM_BATCH = 2000
"""Rows read and rewritten per batch by the migrations to versions 4 and 5."""


class _Schema(_Core):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # ------------------------------------------------------------------ schema

    def _sql(self, template: str) -> str:
        """A schema statement template with this store's table names filled in."""
        return (
            template.replace("{t}", self._t).replace("{meta}", self._meta)
            .replace("{links}", self._links)
        )

    def _schema_statements(self) -> list[str]:
        t, meta = self._t, self._meta
        return [
            "CREATE EXTENSION IF NOT EXISTS vector",
            f"""CREATE TABLE {meta} (key text PRIMARY KEY, value text NOT NULL)""",
            f"""CREATE TABLE {t} (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id text NOT NULL UNIQUE,
                content text NOT NULL,
                embedding vector,
                exact bytea,
                norm float8,
                embedded boolean NOT NULL,
                tagf float8[] NOT NULL,
                tagi int8[] NOT NULL,
                valence float8 GENERATED ALWAYS AS (tagf[1]) STORED,
                arousal float8 GENERATED ALWAYS AS (tagf[2]) STORED,
                dominance float8 GENERATED ALWAYS AS (tagf[3]) STORED,
                created_us bigint GENERATED ALWAYS AS (tagi[1]) STORED,
                retrieval_count bigint GENERATED ALWAYS AS (tagi[5]) STORED,
                pending boolean GENERATED ALWAYS AS ((tagi[7] & 4) <> 0) STORED,
                label text[],
                emotion text GENERATED ALWAYS AS (label[3]) STORED,
                link_targets text[] NOT NULL,
                link_strengths float8[] NOT NULL,
                link_types int2[] NOT NULL,
                metadata jsonb NOT NULL,
                metadata_json text NOT NULL,
                scope text[] NOT NULL DEFAULT '{{}}',
                expires_at timestamptz,
                expires_us bigint,
                terms text[] NOT NULL,
                tfs int4[] NOT NULL,
                doc_len int4 NOT NULL,
                whole text
            ) WITH (fillfactor = {self._fillfactor}, toast_tuple_target = 8160)""",
            f"CREATE INDEX {t}_scope ON {t} USING gin (scope)",
            f"CREATE INDEX {t}_expires ON {t} (expires_us) WHERE expires_us IS NOT NULL",
            f"CREATE INDEX {t}_metadata ON {t} USING gin (metadata jsonb_path_ops)",
            f"CREATE INDEX {t}_terms ON {t} USING gin (terms)",
            f"CREATE INDEX {t}_pending ON {t} (seq) WHERE pending",
            f"CREATE INDEX {t}_embedded ON {t} (seq) WHERE embedded",
            f"CREATE INDEX {t}_novec ON {t} (seq) WHERE embedded AND embedding IS NULL",
            f"CREATE INDEX {t}_created ON {t} (created_us)",
            self._sql(_UNCHANGED_FUNCTION),
            *(self._sql(statement) for statement in _LINKS_STATEMENTS),
            f"INSERT INTO {meta} VALUES ('schema', '{_SCHEMA_NAME}'), "
            f"('version', '{SCHEMA_VERSION}'), ('count', '0'), ('embedded', '0'), "
            "('expiring', '0')",
        ]

    def _ensure_schema(self, conn: Any) -> None:
        """Create the tables on first use; check (and migrate) an existing schema, all
        in one transaction under the store's advisory lock (READ COMMITTED whatever the
        server's default: under REPEATABLE READ a second opener's snapshot predated the
        migration it waited for, which it then ran again)."""
        psycopg = self._psycopg
        try:
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
                rows = conn.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema() AND table_name = ANY(%s)",
                    ([self._t, self._meta],),
                ).fetchall()
                found = {r[0] for r in rows}
                if not found:
                    # every table's creation runs CREATE EXTENSION IF NOT EXISTS, which
                    # fails when another runs it at once: they take turns
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_EXTENSION_LOCK,))
                    for statement in self._schema_statements():
                        conn.execute(statement)
                else:
                    self._check_schema(conn, found)
                conn.execute("COMMIT")
            except BaseException:
                if not conn.closed and not conn.broken:
                    conn.execute("ROLLBACK")
                raise
        except psycopg.Error as exc:
            raise self._error("creating the schema", exc) from None

    def _check_schema(self, conn: Any, found: set[str]) -> None:
        meta: dict[str, str] = {}
        if self._meta in found:
            cols = {
                r[0] for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s",
                    (self._meta,),
                )
            }
            if cols == {"key", "value"}:
                meta = dict(conn.execute(f"SELECT key, value FROM {self._meta}").fetchall())
        if meta.get("schema") != _SCHEMA_NAME or self._t not in found:
            raise PostgresStoreError(
                f"{self._redacted!r}: the tables {self._t!r}/{self._meta!r} exist but were "
                "not written by emotional_memory's PostgresStore; choose another table= "
                "prefix (nothing was written)"
            )
        try:
            version = int(meta.get("version", ""))
        except ValueError:
            version = -1
        if version > SCHEMA_VERSION or version < 1:
            raise PostgresStoreError(
                f"{self._redacted!r}: schema version {meta.get('version')!r} of "
                f"{self._t!r} is not one this package (version {SCHEMA_VERSION}) can use; "
                "upgrade emotional-memory-jax (nothing was written)"
            )
        retokenized = False
        while version < SCHEMA_VERSION:  # one transaction: the caller's
            for statement in _MIGRATIONS[version]:
                conn.execute(self._sql(statement))
            if version == 3 or (version == 4 and not retokenized):
                self._retokenize(conn, non_ascii_only=version == 4)
                retokenized = True  # by today's tokenizer: version 5's rows already
            version += 1
            conn.execute(
                f"UPDATE {self._meta} SET value = %s WHERE key = 'version'", (str(version),)
            )

    def _retokenize(self, conn: Any, non_ascii_only: bool) -> None:
        """Rewrite the rows' ``terms`` / ``tfs`` / ``doc_len`` from their content, in
        batches of :data:`_STEM_BATCH` rows: every row (the migration to version 4:
        stems, tokens of the case-folded NFC text) or, with ``non_ascii_only``, those
        whose content is not ASCII (to version 5: combining marks inside tokens; ASCII
        text tokenizes as before)."""
        last = 0
        only = " AND content ~ %s" if non_ascii_only else ""
        while True:
            rows = conn.execute(
                f"SELECT seq, content FROM {self._t} WHERE seq > %s{only} ORDER BY seq "
                "LIMIT %s",
                (last, *(["[^\x01-\x7f]"] if non_ascii_only else []), _STEM_BATCH),
            ).fetchall()
            if not rows:
                return
            with conn.cursor() as cur:  # psycopg pipelines executemany: few round trips
                cur.executemany(
                    f"UPDATE {self._t} SET terms = %s, tfs = %s, doc_len = %s WHERE seq = %s",
                    [(*lexical_columns(content), seq) for seq, content in rows],
                )
            last = rows[-1][0]

    def _stored_dim(self, cur: Any) -> int | None:
        """The embedding dimension (None before the first embedding), cached for the
        store and its views once committed (it never changes after)."""
        if self._dim is not None:
            return self._dim
        tx = self._current()
        if tx is not None and tx.fixed_dim is not None:
            return tx.fixed_dim[0]  # fixed by this transaction, not committed yet
        row = cur.execute(f"SELECT value FROM {self._meta} WHERE key = 'dim'").fetchone()
        if row is None:
            return None
        self._dim = int(row[0])  # committed before this transaction (if any) began
        return self._dim

    def setting(self, key: str) -> str | None:
        """A value recorded in the meta table (e.g. the embedder's identity).

        Args:
            key: the setting's name.

        Returns:
            Its value, or None when none is recorded.
        """
        with self._read(single=True) as cur:
            row = cur.execute(
                f"SELECT value FROM {self._meta} WHERE key = %s", ("setting:" + key,)
            ).fetchone()
        return None if row is None else str(row[0])

    def record_setting(self, key: str, value: str) -> str:
        """Record ``value`` under ``key`` unless a value is recorded (one transaction).

        Args:
            key: the setting's name.
            value: its value.

        Returns:
            The value recorded now or before.
        """
        with self._write() as cur:
            cur.execute(
                f"INSERT INTO {self._meta} VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                ("setting:" + key, value),
            )
            row = cur.execute(
                f"SELECT value FROM {self._meta} WHERE key = %s", ("setting:" + key,)
            ).fetchone()
        return str(row[0])

    def replace_setting(self, key: str, value: str | None) -> None:
        """Set ``key`` to ``value``, or forget it (None); joins an open transaction.

        Args:
            key: the setting's name.
            value: its new value, or None.
        """
        with self._write() as cur:
            if value is None:
                cur.execute(f"DELETE FROM {self._meta} WHERE key = %s", ("setting:" + key,))
            else:
                cur.execute(
                    f"INSERT INTO {self._meta} VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    ("setting:" + key, value),
                )

    def _fix_dim(self, cur: Any, dim: int) -> None:
        """Record the embedding dimension on the first embedding: type the vector
        column and build the HNSW index (none past :data:`MAX_HNSW_DIM` dimensions),
        inside the writing transaction."""
        row = cur.execute(
            f"SELECT value FROM {self._meta} WHERE key = 'dim' FOR UPDATE"
        ).fetchone()
        if row is not None:
            self._dim = int(row[0])
            return
        t = self._t
        m, ef = self._hnsw
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN embedding TYPE vector({dim})")
        if dim <= MAX_HNSW_DIM:  # longer: no index, searches scan (still exact)
            cur.execute(
                f"CREATE INDEX {t}_hnsw ON {t} USING hnsw (embedding vector_cosine_ops) "
                f"WITH (m = {m}, ef_construction = {ef})"
            )
        cur.execute(f"INSERT INTO {self._meta} VALUES ('dim', %s)", (str(dim),))
        tx = self._current()
        assert tx is not None and tx.write
        tx.fixed_dim = (dim, tx.depth)  # cached for every view once committed

    @property
    def dim(self) -> int | None:
        """The embedding dimension (None while no memory has had an embedding)."""
        with self._read() as cur:
            return self._stored_dim(cur)
