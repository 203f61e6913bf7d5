"""Code shared by the store backends: the record codec, the one exact ranking rule,
resonance linking, and the row engine the in-memory and SQLite backends run on.

Backends import from here and from :mod:`emotional_memory.stores.base`, never from
each other. See ``README.md`` in this folder.
"""
