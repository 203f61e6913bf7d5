"""The engine's configuration and the values derived from one config object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from emotional_memory._precision import float64
from emotional_memory._validation import in_range
from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import ScoringParams, pack_params
from emotional_memory.kernel.adapter import QueryAdapter, adapt_query
from emotional_memory.lexical import stop_word_set
from emotional_memory.mood import MoodDecayConfig
from emotional_memory.resonance import ResonanceConfig
from emotional_memory.retrieval import RetrievalConfig, scoring_params


def adapt_embedding(adapter: QueryAdapter | None, embedding: np.ndarray) -> np.ndarray:
    """The query embedding the store searches and s1 scores (the adapter's map of it).

    Args:
        adapter: the config's adapter, or None (the embedding is returned as it is).
        embedding: (D,) float64 query embedding (or an empty one: no semantic signal).

    Returns:
        (D,) float64 adapted embedding.

    Raises:
        ValueError: the embedding's dimension is not the adapter's.
    """
    if adapter is None or embedding.size == 0:
        return embedding
    if embedding.shape != (adapter.dim,):
        raise ValueError(
            f"retrieval.query_adapter.dim is {adapter.dim} but the embedder returned a "
            f"query embedding of length {embedding.shape[0]}"
        )
    with float64():
        return np.asarray(_adapt_jit(adapter, embedding), np.float64)


_adapt_jit = jax.jit(adapt_query)


class _ConfigDerived:
    """What the engine derives from one (frozen) config object, computed once.

    Args:
        config: the engine configuration.

    Attributes:
        config: the config these values belong to (compared by identity).
        signal_mask: its (6,) ablation mask.
        all_signals_on: whether the mask keeps every signal (weights pass through).
        mask: the mask as a float64 array for the plan program (None: all on; 7
            entries when the lexical signal is on, s7 always kept).
        params: float64 scoring parameters of the plan, packed into one device
            vector (:func:`~emotional_memory.kernel.params.pack_params`).
        lexical_on: whether the lexical signal s7 takes part (weight > 0 and
            ``enable_lexical``).
        stop_words: the query words s7 ignores.
        analysis: the lexical analysis (``lexical_stemmer``).
        query_counts: whether query terms count once per occurrence.
        adapter: the query adapter's float64 factors (None: the query as embedded).
        context_on: whether the context signal s8 takes part (``context_weight > 0``;
            s7 is then scored too and the mask, when any, has 8 entries).
        context_window: the context signal's time window in seconds (None: none).
    """

    def __init__(self, config: EmotionalMemoryConfig) -> None:
        self.config = config
        self.signal_mask = config.signal_mask()
        self.all_signals_on = all(v == 1.0 for v in self.signal_mask)
        self.mask = None if self.all_signals_on else np.asarray(self.signal_mask, np.float64)
        self.params = self._device(scoring_params(config.retrieval, config.decay))
        self._routes: dict[tuple[float, ...], jax.Array] = {}
        self.lexical_on = config.enable_lexical and config.retrieval.lexical_on
        self.stop_words = stop_word_set(config.retrieval.lexical_stop_words)
        self.analysis = config.retrieval.lexical_stemmer
        adapter = config.retrieval.query_adapter
        self.adapter = None if adapter is None else QueryAdapter(*adapter.factors())
        self.query_counts = config.retrieval.lexical_query_counts
        self.context_on = config.retrieval.context_on
        self.context_window = config.retrieval.context_window_seconds
        if self.context_on:  # s7 (masked by enable_lexical) and s8 both scored
            lexical_mask = 1.0 if config.enable_lexical else 0.0
            if self.mask is not None or lexical_mask == 0.0:
                self.mask = np.asarray([*self.signal_mask, lexical_mask, 1.0], np.float64)
        elif self.lexical_on and self.mask is not None:
            self.mask = np.append(self.mask, 1.0)

    @staticmethod
    def _device(params: ScoringParams) -> jax.Array:
        """``params`` packed into one float64 device vector (the plan's one operand).

        Args:
            params: parameters with float64 numpy leaves.

        Returns:
            (41,) :func:`~emotional_memory.kernel.params.pack_params` vector on the
            default device.
        """
        with float64():  # float64 stays float64 on the device
            out: jax.Array = jax.device_put(pack_params(params))
        return out

    def weight_params(self, base_weights: Sequence[float]) -> jax.Array:
        """Parameters for the adaptive weights of these (routed) base weights.

        Args:
            base_weights: the six base weights of the query's route.

        Returns:
            Packed device parameters with these base weights and the config's gates.
        """
        key = tuple(base_weights)
        params = self._routes.get(key)
        if params is None:
            params = self._device(
                scoring_params(self.config.retrieval, self.config.decay, base_weights=key)
            )
            self._routes[key] = params
        return params


class EmotionalMemoryConfig(BaseModel):
    """Everything that configures an :class:`EmotionalMemory`.

    Attributes:
        decay: recency signal parameters.
        retrieval: weights, gates, reconsolidation and routing.
        resonance: link building and spreading activation.
        mood_alpha: mood blending rate per affect update (in [0, 1]).
        mood_decay: optional regression of mood towards a baseline between updates.
        dual_path_encoding: encode fast, appraise later (``elaborate``).
        elaboration_learning_rate: blend of the appraised affect at elaboration.
        auto_categorize: store a Plutchik label with each tag.
        enable_reconsolidation, enable_appraisal, enable_mood_signal, enable_momentum,
        enable_resonance: ablation switches (all on by default).
        enable_lexical: ablation switch of the opt-in lexical signal s7 (it takes part
            only when also ``retrieval.lexical_weight > 0``).
        max_content_length: optional limit on the content length (characters).
        appraisal_max_concurrency: most appraisals a batch runs at once (>= 1; as in
            the original: threads for a sync engine, tasks for an async one).
        query_affect_gate_tau: |valence| below which :meth:`EmotionalMemory.
            retrieve_query_gated` treats the query as affect-neutral ([0, 2]).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decay: DecayConfig = Field(default_factory=DecayConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    resonance: ResonanceConfig = Field(default_factory=ResonanceConfig)
    mood_alpha: float = 0.1
    mood_decay: MoodDecayConfig | None = None
    dual_path_encoding: bool = False
    elaboration_learning_rate: float = 0.7
    auto_categorize: bool = False
    enable_reconsolidation: bool = True
    enable_appraisal: bool = True
    enable_mood_signal: bool = True
    enable_momentum: bool = True
    enable_resonance: bool = True
    enable_lexical: bool = True
    max_content_length: int | None = None
    appraisal_max_concurrency: int = Field(default=8, ge=1)
    query_affect_gate_tau: float = Field(default=0.2, ge=0.0, le=2.0)

    @field_validator("mood_alpha", "elaboration_learning_rate", mode="before")
    @classmethod
    def _unit(cls, v: float, info: Any) -> float:
        return in_range(info.field_name, v, 0.0, 1.0)

    @field_validator("max_content_length", mode="after")
    @classmethod
    def _max_len(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"max_content_length must be >= 1, got {v}")
        return v

    def signal_mask(self) -> list[float]:
        """The (6,) ablation mask: mood congruence, momentum and resonance switches.

        Returns:
            Six floats in docs/behaviour.md §4 signal order; 1.0 for enabled signals, 0.0 for the
            mood (s2), momentum (s4) or resonance (s6) signal when switched off.
        """
        return [
            1.0,
            1.0 if self.enable_mood_signal else 0.0,
            1.0,
            1.0 if self.enable_momentum else 0.0,
            1.0,
            1.0 if self.enable_resonance else 0.0,
        ]
