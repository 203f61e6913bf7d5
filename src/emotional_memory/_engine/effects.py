"""What a retrieval does to its winners: reconsolidation, prediction, Hebbian links."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from emotional_memory._engine.core import EngineCore
from emotional_memory.models import Memory, with_fields
from emotional_memory.resonance import hebbian_strengthen
from emotional_memory.retrieval import (
    compute_ape,
    prediction_fields,
    reconsolidation_fields,
)
from emotional_memory.stores.base import ModifyingStore, TagWritingStore


class EffectsMixin(EngineCore):
    """The retrieval side effects (docs/behaviour.md §6), applied to the winners' current rows."""

    def _after_retrieval(self, winners: list[str], now: datetime) -> list[Memory]:
        """Apply the retrieval side effects to the winners' current rows, in one transaction.

        The winners (ids, best first) are read inside the store's write transaction,
        so another engine or process writing the same memories between the ranking
        and now loses no update (a winner deleted meanwhile is dropped). These are the
        only memories a retrieval builds as objects. A store with
        ``modify_memories(ids, change)`` does the read-modify-write itself (with the
        same guarantees; ``change`` may run more than once).
        """
        store = self._columnar
        if isinstance(store, ModifyingStore):  # the store's own read-modify-write
            updated: list[Memory] = store.modify_memories(
                winners, lambda current: self._retrieval_effects(current, now)
            )
            return updated
        with store.transaction():
            updated = self._retrieval_effects(store.memories(winners), now)
            # only the tags change: a store that can write just them (InMemoryStore)
            # skips comparing and copying the rest of each memory
            if isinstance(store, TagWritingStore):
                store.update_tags([(m.id, m.tag) for m in updated])
            else:
                for m in updated:
                    store.update(m)
        return updated

    def _retrieval_effects(self, winners: list[Memory], now: datetime) -> list[Memory]:
        """Reconsolidation, prediction update and Hebbian strengthening (docs/behaviour.md §6).

        Each winner's changed tag fields are gathered in one dict and its tag copied
        once (what :func:`reconsolidate`, :func:`update_prediction` and the Hebbian
        update give one after another, without their intermediate copies).
        """
        cfg = self.config.retrieval
        affect = self._state.core_affect
        reconsolidation = self.config.enable_reconsolidation
        increment = self.config.resonance.hebbian_increment
        hebbian = increment > 0 and len(winners) > 1
        ids = [m.id for m in winners]
        out: list[Memory] = []
        for memory in winners:
            tag = memory.tag
            changes: dict[str, Any] = {
                "last_retrieved": now, "retrieval_count": tag.retrieval_count + 1,
            }
            # last_retrieved and the count do not enter the prediction error
            ape = compute_ape(tag, affect)
            if reconsolidation:
                window = tag.window_opened_at
                opens = window is None and ape > cfg.ape_threshold
                labile = window is not None and (
                    (now - window).total_seconds() <= cfg.reconsolidation_window_seconds
                )
                if opens or labile:
                    changes.update(reconsolidation_fields(
                        tag, affect, ape, cfg.reconsolidation_learning_rate
                    ))
                if opens:
                    changes["window_opened_at"] = now
                elif window is not None and not labile:  # the window has closed
                    changes["window_opened_at"] = None
            changes.update(prediction_fields(tag, affect, ape, changes.get("core_affect")))
            if hebbian:
                # the links as stored: the updates above leave them alone
                changes["resonance_links"] = hebbian_strengthen(
                    memory, [i for i in ids if i != memory.id], increment
                )
            out.append(with_fields(memory, {"tag": with_fields(tag, changes)}))
        return out
