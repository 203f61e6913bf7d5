"""Conversion between the pydantic configs and the kernel's :class:`ScoringParams`.

The kernel (``emotional_memory.kernel``) knows nothing of configs: it holds the gate,
recency and lexical parameters as named scalar leaves whose names are the config
fields (:data:`~emotional_memory.kernel.GATE_FIELDS`,
:data:`~emotional_memory.kernel.DECAY_FIELDS`; the lexical ones map to
:data:`~emotional_memory.kernel.LEXICAL_FIELDS`). This module is the one boundary where
config fields become parameter leaves and back. Reading is duck-typed (any object with
the config attributes works); :func:`params_from_config` and
:func:`params_to_config_dicts` live in ``emotional_memory._params``, which imports only
the kernel, so ``decay`` and ``retrieval`` use them without importing this module.

Imports run one way: ``scoring_config`` -> ``retrieval`` / ``decay`` -> ``_params``
-> ``kernel``, never back.
"""

from __future__ import annotations

from typing import Any

from emotional_memory._params import params_from_config, params_to_config_dicts
from emotional_memory._validation import instance
from emotional_memory.decay import DecayConfig
from emotional_memory.kernel.params import ScoringParams
from emotional_memory.retrieval import AdaptiveWeightsConfig, RetrievalConfig

__all__ = ["params_from_config", "params_to_config", "params_to_config_dicts"]


def params_to_config(
    params: ScoringParams, retrieval_config: Any = None, decay_config: Any = None
) -> tuple[Any, Any]:
    """Return ``(RetrievalConfig, DecayConfig)`` holding ``params``.

    Fields that are not scoring parameters (thresholds, routing, ...) are copied from
    the optional templates.

    Args:
        params: the parameters to write.
        retrieval_config: template RetrievalConfig (default: defaults).
        decay_config: template DecayConfig (default: defaults).

    Returns:
        Validated config objects.

    Raises:
        TypeError: an argument of the wrong type (named).
        ValueError: if a parameter is outside its config field's valid range.
    """
    instance("params", params, ScoringParams)
    instance("retrieval_config", retrieval_config, RetrievalConfig, optional=True)
    instance("decay_config", decay_config, DecayConfig, optional=True)
    retrieval_fields, decay_fields = params_to_config_dicts(params)
    retrieval_fields["adaptive_weights_config"] = AdaptiveWeightsConfig(
        **retrieval_fields["adaptive_weights_config"]
    )
    base_r = retrieval_config if retrieval_config is not None else RetrievalConfig()
    base_d = decay_config if decay_config is not None else DecayConfig()
    r = RetrievalConfig.model_validate({**base_r.model_dump(), **retrieval_fields})
    d = DecayConfig.model_validate({**base_d.model_dump(), **decay_fields})
    return r, d
