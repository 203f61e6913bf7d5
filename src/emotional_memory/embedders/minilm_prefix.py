"""A bounded prefix of a very long text that a tokenizer gives the same first ids as
the whole text (:meth:`MiniLMEmbedder.tokenize
<emotional_memory.embedders.minilm.MiniLMEmbedder.tokenize>`), and whether a
tokenizer allows one.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: A text longer than ``max_length`` times this many characters is tokenised from a
#: prefix (:func:`token_prefix`), whose length doubles from this start.
CHARS_PER_TOKEN = 16
#: Characters a BERT-style tokenizer always splits words at (whitespace it keeps).
_WORD_BREAK = re.compile("[ \t\n\r]")
#: Pre-tokenizers that split words at every whitespace character.
_SPLITTERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})
#: Pre-tokenizers that only split further (beside a splitter of :data:`_SPLITTERS`).
_FURTHER_SPLITTERS = _SPLITTERS | {"Punctuation", "Digits"}
#: Normalizers that keep whitespace whitespace and change each character alone.
_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "NFD", "NFC", "NFKC", "NFKD",
                          "StripAccents"})


def _members(spec: Any, key: str) -> list[Any]:
    """The steps of a ``Sequence`` normalizer/pre-tokenizer spec, else ``[spec]``."""
    if isinstance(spec, dict) and spec.get("type") == "Sequence":
        members = spec.get(key)
        return members if isinstance(members, list) else [None]
    return [spec]


def prefix_safe(tokenizer: Any) -> bool:
    """Whether :func:`token_prefix` may cut texts for ``tokenizer``: its normalizers
    change each character alone (:data:`_NORMALIZERS`), its pre-tokenizer splits words
    at every whitespace (:data:`_SPLITTERS`), and no added token holds whitespace
    (it would be matched across the cut).

    Args:
        tokenizer: a ``tokenizers.Tokenizer``.

    Returns:
        True when a prefix ending after a whitespace past the kept word pieces gives
        the ids of the whole text.
    """
    try:
        spec = json.loads(tokenizer.to_str())
    except Exception:
        return False
    normalizers = _members(spec.get("normalizer"), "normalizers")
    if not all(n is None or (isinstance(n, dict) and n.get("type") in _NORMALIZERS)
               for n in normalizers):
        return False
    steps = _members(spec.get("pre_tokenizer"), "pretokenizers")
    kinds = [step.get("type") if isinstance(step, dict) else None for step in steps]
    if not any(kind in _SPLITTERS for kind in kinds) or not all(
            kind in _FURTHER_SPLITTERS for kind in kinds):
        return False
    return not any(any(ch.isspace() for ch in str(added.get("content", "")))
                   for added in spec.get("added_tokens") or () if isinstance(added, dict))


def token_prefix(tokenizer: Any, text: str, cut: int, max_length: int) -> str:
    """A prefix of ``text`` whose first ``max_length`` ids are those of ``text``.

    Only the first ``max_length - 2`` word pieces matter, so a long text is tokenised
    from prefixes of ``cut``, ``2 * cut``, ... characters until one holds that many
    pieces and ends after a whitespace character following them (their last word is
    then whole). A text of mostly dropped characters (controls, accents, spaces) grows
    the prefix to the whole text; the work stays linear.

    Args:
        tokenizer: a tokenizer for which :func:`prefix_safe` holds, truncating at
            ``max_length``.
        text: a stripped, valid text.
        cut: the first prefix length tried.
        max_length: the ids kept.

    Returns:
        The prefix (``text`` itself when no shorter one is certain).
    """
    while cut < len(text):
        prefix = text[:cut]
        enc = tokenizer.encode(prefix)
        if len(enc.ids) >= max_length:
            end = max((stop for (_, stop), word in zip(enc.offsets, enc.word_ids,
                                                       strict=True) if word is not None),
                      default=0)  # max_length 2: no word pieces at all
            if _WORD_BREAK.search(prefix, end) is not None:
                return prefix
        cut *= 2
    return text
