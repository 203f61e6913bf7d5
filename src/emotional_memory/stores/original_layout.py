"""Compatibility path: see :mod:`emotional_memory.stores.sqlite.original_layout`."""

from emotional_memory.stores.sqlite.original_layout import (
    MEMORY_TABLE,
    ORIGINAL_MEMORIES_BACKUP,
    ORIGINAL_STATE_BACKUP,
    STATE_TABLE,
    original_memories,
    original_states,
    prepare_memory_file,
    prepare_state_file,
    prepare_state_tables,
)

__all__ = [
    "MEMORY_TABLE",
    "ORIGINAL_MEMORIES_BACKUP",
    "ORIGINAL_STATE_BACKUP",
    "STATE_TABLE",
    "original_memories",
    "original_states",
    "prepare_memory_file",
    "prepare_state_file",
    "prepare_state_tables",
]
