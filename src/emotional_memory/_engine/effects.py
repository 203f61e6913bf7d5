"""What a retrieval does to its winners: reconsolidation, prediction, Hebbian links."""

from __future__ import annotations

from datetime import datetime

from emotional_memory._engine.core import EngineCore
from emotional_memory.models import EmotionalTag, Memory, with_fields
from emotional_memory.resonance import hebbian_strengthen
from emotional_memory.retrieval import (
    compute_ape,
    reconsolidate,
    update_prediction,
)


class EffectsMixin(EngineCore):
    """The retrieval side effects (SPEC 6), applied to the winners' current rows."""

    def _after_retrieval(self, winners: list[str], now: datetime) -> list[Memory]:
        """Apply the retrieval side effects to the winners' current rows, in one transaction.

        The winners (ids, best first) are read inside the store's write transaction,
        so another engine or process writing the same memories between the ranking
        and now loses no update (a winner deleted meanwhile is dropped). These are the
        only memories a retrieval builds as objects.
        """
        store = self._columnar
        with store.transaction():
            updated = self._retrieval_effects(store.memories(winners), now)
            for m in updated:
                store.update(m)
        return updated

    def _retrieval_effects(self, winners: list[Memory], now: datetime) -> list[Memory]:
        """Reconsolidation, prediction update and Hebbian strengthening (SPEC 6)."""
        cfg = self.config.retrieval
        affect = self._state.core_affect
        tags: list[EmotionalTag] = []
        for memory in winners:
            count = memory.tag.retrieval_count + 1
            tag: EmotionalTag = with_fields(
                memory.tag, {"last_retrieved": now, "retrieval_count": count}
            )
            ape = compute_ape(tag, affect)
            if self.config.enable_reconsolidation:
                if ape > cfg.ape_threshold and tag.window_opened_at is None:
                    tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                    tag = with_fields(tag, {"window_opened_at": now})
                elif tag.window_opened_at is not None:
                    open_for = (now - tag.window_opened_at).total_seconds()
                    if open_for <= cfg.reconsolidation_window_seconds:
                        tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                    else:
                        tag = with_fields(tag, {"window_opened_at": None})
            tags.append(update_prediction(tag, affect, ape))
        increment = self.config.resonance.hebbian_increment
        if increment > 0 and len(winners) > 1:
            # The updates above leave the links as they were, so each winner's new links
            # come from its own row; one copy of each memory carries both updates.
            ids = [m.id for m in winners]
            tags = [
                with_fields(tag, {"resonance_links": hebbian_strengthen(m, ids, increment)})
                for m, tag in zip(winners, tags, strict=True)
            ]
        return [with_fields(m, {"tag": tag}) for m, tag in zip(winners, tags, strict=True)]
