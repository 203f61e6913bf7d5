"""Text embedders that turn strings into dense vectors for memory retrieval."""

from emotional_memory.embedders.hashing import HashingEmbedder

__all__ = ["HashingEmbedder"]
