"""Old import path of :mod:`emotional_memory.batch_retrieval` (read-only batch retrieval).

Kept because ``emotional_memory.batch.score_queries`` / ``BatchRetriever`` are public.
"""

from emotional_memory.batch_retrieval import *  # noqa: F403
from emotional_memory.batch_retrieval import __all__ as __all__
