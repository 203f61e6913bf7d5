"""Core affect rated from text: what an engine's ``affect_from_text`` option takes.

An :class:`AffectRater` turns texts into :class:`~emotional_memory.affect.CoreAffect`
values, many at once. Given one as ``EmotionalMemory(..., affect_from_text=rater)``,
the engine rates every event that comes without an affect, an appraisal or an
appraisal engine, and feeds the rating exactly as ``encode(..., affect=...)`` would
(see :meth:`~emotional_memory.engine.EmotionalMemory.encode`).

:class:`TextAffectRater` is the rater shipped with the library: the EmoBank
regression head of :mod:`emotional_memory.appraisal_embedding` over MiniLM features,
no LLM. Pass it the engine's own :class:`~emotional_memory.embedders.MiniLMEmbedder`
to load the weights once::

    embedder = MiniLMEmbedder()
    engine = EmotionalMemory(store, embedder, affect_from_text=TextAffectRater(embedder))
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from emotional_memory.affect import CoreAffect

__all__ = ["AffectRater", "AffectRatingError", "TextAffectRater", "checked_ratings"]

#: The embedder whose features the shipped head was trained on.
_HEAD_EMBEDDER = "minilm-l6-v2/384"


class AffectRatingError(RuntimeError):
    """An engine's ``affect_from_text`` rater failed: it raised, or answered something
    else than one finite :class:`CoreAffect` per text (the cause is chained).

    A fault of the engine's own component, not of the call's arguments: hence not a
    ``ValueError`` / ``TypeError`` (the service answers it as a server error, its
    message kept to the server's log). Nothing was stored and the state did not move.
    """


@runtime_checkable
class AffectRater(Protocol):
    """Rates the core affect of texts (valence, arousal, dominance)."""

    def rate_affect(self, texts: Sequence[str]) -> Sequence[CoreAffect]:
        """Rate several texts.

        Args:
            texts: the texts.

        Returns:
            One :class:`CoreAffect` per text, in order.
        """
        ...


def checked_ratings(rater: Any, texts: Sequence[str]) -> list[CoreAffect]:
    """Call ``rater.rate_affect(texts)`` and check what it returns.

    Args:
        rater: an :class:`AffectRater`.
        texts: the texts.

    Returns:
        One :class:`CoreAffect` per text.

    Raises:
        TypeError: the rater returned something else than a sequence of CoreAffect
            (the entry is named).
        ValueError: the rater returned another number of ratings than texts, or a
            CoreAffect that skipped validation (``model_construct``) with a value
            that is no finite number (the entry and the field are named). One out
            of range is clamped, as ``CoreAffect`` clamps.
    """
    out = rater.rate_affect(list(texts))
    if isinstance(out, str | bytes | dict) or not isinstance(out, Sequence):
        raise TypeError(
            f"affect_from_text.rate_affect must return a sequence of CoreAffect, got "
            f"{type(out).__name__}"
        )
    if len(out) != len(texts):
        raise ValueError(
            f"affect_from_text.rate_affect returned {len(out)} ratings for {len(texts)} texts"
        )
    checked = []
    for i, a in enumerate(out):
        if not isinstance(a, CoreAffect):
            raise TypeError(
                f"affect_from_text.rate_affect returned {type(a).__name__} at index {i}, "
                "not a CoreAffect"
            )
        values = {name: getattr(a, name, None) for name in ("valence", "arousal", "dominance")}
        for name, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(
                    f"affect_from_text.rate_affect returned {name}={v!r} at index {i}: "
                    "not a finite number (a CoreAffect that skipped validation?)"
                )
        # rebuilt, so that a model_construct()-ed one is clamped as CoreAffect clamps
        checked.append(CoreAffect(**values))
    return checked


class TextAffectRater:
    """The shipped rater: the EmoBank head over MiniLM features, as an :class:`AffectRater`.

    Valence in [-1, 1], arousal and dominance in [0, 1], from the text alone (Pearson
    r on EmoBank dev 0.70 / 0.56 / 0.40; see the README's "Affect from text, no LLM").
    EmoBank's ratings are mild (most sentences lie within +-0.5 of neutral valence),
    and so are this head's. A text is read up to the embedder's ``max_length`` tokens
    (256 by default, about 200 words): a longer one is rated from its beginning, and
    its length bounds the tokenizer's work only (the engine passes the whole content;
    the service bounds it with ``max_content_bytes``).

    Args:
        embedder: the :class:`~emotional_memory.embedders.MiniLMEmbedder` whose
            features the head reads (share the engine's to load the weights once,
            unless it is a fitted one: the shipped head reads the base model's);
            ``None`` creates one.
        head: an :class:`~emotional_memory.appraisal_embedding.AffectHead`, a path to a
            head ``.npz``, or ``None`` for the shipped head.

    Raises:
        ImportError: ``embedder`` is None and MiniLM is not installed (the message
            says how to install it).
        ValueError: the shipped head (``head`` None) with an embedder of another
            identity than the base all-MiniLM-L6-v2's (e.g. a fitted MiniLM), named;
            an embedding head and an embedder of another ``dim`` than its width.
        TypeError: a pooled-layer head (as the shipped one) and an embedder without
            ``pooled_layers``.
    """

    name = "emobank-head"

    def __init__(self, embedder: Any = None, head: Any | str | os.PathLike[str] = None) -> None:
        from emotional_memory.appraisal_embedding import EmbeddingAppraisalEngine
        from emotional_memory.embedder_identity import embedder_identity

        given = embedder_identity(embedder)
        if head is None and given not in (None, _HEAD_EMBEDDER):
            raise ValueError(
                f"the shipped affect head reads the features of {_HEAD_EMBEDDER!r}, not of "
                f"the embedder given ({given!r}): pass MiniLMEmbedder() (or embedder=None) "
                "for the rater, or a head trained on this embedder's features"
            )
        self._engine = EmbeddingAppraisalEngine(embedder, head)

    @property
    def embedder(self) -> Any:
        """The text encoder the head reads."""
        return self._engine.embedder

    def rate_affect(self, texts: Sequence[str]) -> list[CoreAffect]:
        """Rate several texts in one batched pass.

        Args:
            texts: the texts.

        Returns:
            One :class:`CoreAffect` per text, in order.

        Raises:
            TypeError: ``texts`` is a single ``str`` or holds a non-``str``.
        """
        rows = self._engine.predict_affect(texts)
        return [
            CoreAffect(valence=float(v), arousal=float(a), dominance=float(d))
            for v, a, d in rows.tolist()
        ]

    def rate(self, text: str) -> CoreAffect:
        """Rate one text.

        Args:
            text: the text.

        Returns:
            Its :class:`CoreAffect`.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.rate_affect([text])[0]

    def __repr__(self) -> str:
        """Readable summary."""
        return f"TextAffectRater(embedder={type(self.embedder).__name__})"
