"""The in-process row engine: memories as struct-of-arrays rows with exact search,
transactions (undo log), row linking, candidate columns and scope/filter selection.

:class:`~emotional_memory.stores._shared.rows.store.RowStore` composes the parts; the
in-memory backend exposes it as is and the SQLite backend keeps one as its cache.
"""
