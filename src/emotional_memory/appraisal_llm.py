"""Text-driven appraisal engines at the original library's module path.

The keyword and LLM engines are defined in :mod:`emotional_memory.appraisal`; this
module re-exports them so ``from emotional_memory.appraisal_llm import ...`` (the
original's layout) runs unchanged.
"""

from __future__ import annotations

from emotional_memory.appraisal import (
    KeywordAppraisalEngine,
    KeywordRule,
    LLMAppraisalConfig,
    LLMAppraisalEngine,
    LLMCallable,
)
from emotional_memory.appraisal_schema import SCHERER_CPM_SCHEMA

__all__ = [
    "SCHERER_CPM_SCHEMA",
    "KeywordAppraisalEngine",
    "KeywordRule",
    "LLMAppraisalConfig",
    "LLMAppraisalEngine",
    "LLMCallable",
]
