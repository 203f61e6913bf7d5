"""Which embedder a store's memories were embedded with, recorded in the store.

Embeddings of two embedders are not comparable, even at the same dimension, so a store
that keeps settings records its embedder's identity and an engine refuses another one.

* :func:`embedder_identity`: an embedder's ``identity`` attribute (e.g.
  ``"minilm-l6-v2/384"``, ``"hashing/384"``), or None (never checked).
* :func:`record_embedder`: record it unless one is recorded; refuse a different one.
* :func:`check_embedder`: refuse an embedder other than the recorded one (every engine
  does this at construction; a store with nothing recorded is never refused).

A store keeps settings when it has ``setting(key) -> str | None`` and
``record_setting(key, value) -> str`` (records ``value`` unless ``key`` has one;
returns the value recorded).
"""

from __future__ import annotations

from typing import Any

from emotional_memory.stores.base import SettingsStore

__all__ = [
    "EMBEDDER_SETTING",
    "REEMBED_SETTING",
    "EmbedderMismatchError",
    "ReembedInProgressError",
    "check_embedder",
    "embedder_identity",
    "record_embedder",
    "recorded_embedder",
]

EMBEDDER_SETTING = "embedder"
"""The settings key under which a store records its embedder's identity."""

REEMBED_SETTING = "reembedding"
"""The settings key of a re-embedding in progress (:mod:`emotional_memory.reembed`): its
vectors are then of two embedders, and no engine may open the store."""


class EmbedderMismatchError(ValueError):
    """A store recorded another embedder than the one it is opened with.

    Attributes:
        recorded: the identity the store recorded.
        given: the identity of the embedder given.
    """

    def __init__(self, recorded: str, given: str) -> None:
        super().__init__(
            f"this store's memories were embedded with {recorded!r}, but the embedder "
            f"given is {given!r}: embeddings of different embedders cannot be compared. "
            f"Open it with the {recorded!r} embedder, re-embed its memories "
            "(emotional_memory.reembed.reembed_store, `python -m training reembed`), or "
            "use another store."
        )
        self.recorded = recorded
        self.given = given


class ReembedInProgressError(ValueError):
    """A store's re-embedding was started and not finished: its vectors are of two
    embedders until :func:`~emotional_memory.reembed.reembed_store` completes it."""

    def __init__(self, progress: str) -> None:
        super().__init__(
            f"this store is being re-embedded ({progress}): its vectors are of two embedders "
            "until it finishes; run reembed_store(store, embedder) (or `python -m training "
            "reembed`) again with the new embedder to resume it"
        )


def embedder_identity(embedder: Any) -> str | None:
    """The identity of an embedder: ``name/dim``.

    Args:
        embedder: any embedder.

    Returns:
        Its ``identity`` attribute when it is a non-empty str, else None.
    """
    identity = getattr(embedder, "identity", None)
    return identity if isinstance(identity, str) and identity else None


def _keeps_settings(store: Any) -> bool:
    return isinstance(store, SettingsStore)


def recorded_embedder(store: Any) -> str | None:
    """The embedder identity ``store`` recorded.

    Args:
        store: a memory store.

    Returns:
        The identity, or None when none is recorded or the store keeps no settings.
    """
    if not _keeps_settings(store):
        return None
    value = store.setting(EMBEDDER_SETTING)
    return value if isinstance(value, str) else None


def check_embedder(store: Any, embedder: Any) -> None:
    """Refuse ``embedder`` when ``store`` recorded another one.

    Args:
        store: a memory store.
        embedder: the embedder it is to be used with.

    Raises:
        EmbedderMismatchError: the store recorded an identity and the embedder has
            another (both named).
        ReembedInProgressError: a re-embedding of the store is unfinished.
    """
    if _keeps_settings(store):
        progress = store.setting(REEMBED_SETTING)
        if progress is not None:
            raise ReembedInProgressError(progress)
    given = embedder_identity(embedder)
    if given is None:
        return
    recorded = recorded_embedder(store)
    if recorded is not None and recorded != given:
        raise EmbedderMismatchError(recorded, given)


def record_embedder(store: Any, embedder: Any) -> str | None:
    """Record ``embedder``'s identity in ``store`` unless one is recorded; refuse another.

    Args:
        store: a memory store.
        embedder: the embedder it is used with.

    Returns:
        The identity recorded (the embedder's), or None when the store keeps no
        settings or the embedder has no identity (nothing recorded).

    Raises:
        EmbedderMismatchError: the store recorded a different identity.
    """
    given = embedder_identity(embedder)
    if given is None or not _keeps_settings(store):
        return None
    recorded = store.record_setting(EMBEDDER_SETTING, given)
    if recorded != given:
        raise EmbedderMismatchError(str(recorded), given)
    return given
