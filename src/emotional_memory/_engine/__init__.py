"""The parts :class:`~emotional_memory.engine.EmotionalMemory` is composed of, by concern.

- ``config``: ``EmotionalMemoryConfig`` and what the engine derives from one config.
- ``locks``: the per-engine lock decorators.
- ``core``: the engine's attributes and its input checks (time, content, embeddings).
- ``state``: the affective state: set, save, load, persist, mood.
- ``encoding``: encode, encode_batch, observe, elaborate; resonance linking.
- ``ranking``: candidates (semantic, lexical, hybrid), the two-pass ranking, retrieve*.
- ``effects``: what retrieval does to its winners (reconsolidation, prediction, Hebbian).
- ``records``: get, delete, update, list, prune, export and import of memories.

``emotional_memory.engine`` composes them into the one ``EmotionalMemory`` class.
"""
