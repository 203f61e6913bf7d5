"""Bad batches given to the embedders and the pair scorer: a TypeError or ValueError
naming the argument (``texts``, ``query``, the item's index in the caller's list)."""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory.embedders import HashingEmbedder
from emotional_memory.embedders.cross_encoder import PairScorer, init_cross_encoder
from support.minilm import require_minilm
from support.tiny_bert import TinyEmbedder, tiny_model

_NOT_A_BATCH = [None, 5, 2.5, b"abc", bytearray(b"ab")]


def _minilm() -> Any:
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder()


@pytest.mark.parametrize("texts", _NOT_A_BATCH, ids=repr)
def test_hashing_embed_batch_names_texts_when_it_is_no_batch(texts: Any) -> None:
    """``None`` and numbers raised "'NoneType' object is not iterable" (no argument
    named); bytes were taken as a batch of ints ("text (texts[0]) must be str, got int")."""
    emb = HashingEmbedder(dim=16)
    for call in (emb.embed_batch, emb.embed_array):
        with pytest.raises(TypeError, match=r"^texts must be a sequence of str, got "):
            call(texts)


@pytest.mark.parametrize("texts", _NOT_A_BATCH, ids=repr)
def test_minilm_embed_batch_names_texts_when_it_is_no_batch(texts: Any) -> None:
    emb = _minilm()
    for call in (emb.embed_batch, emb.embed_array, emb.tokenize, emb.pooled_layers):
        with pytest.raises(TypeError, match=r"^texts must be a sequence of str, got "):
            call(texts)


def test_minilm_embed_names_text_for_a_lone_surrogate() -> None:
    """``embed`` named its argument ``text (texts[0])``: a list the caller never made."""
    emb = _minilm()
    with pytest.raises(ValueError, match=r"^text is not valid Unicode"):
        emb.embed("ok \ud800")
    with pytest.raises(ValueError, match=r"^text \(texts\[1\]\) is not valid Unicode"):
        emb.embed_batch(["ok", "\udfff"])


def test_pair_scorer_names_the_bad_memory_text_and_the_query() -> None:
    """The query was tokenised as ``texts[0]`` of one list with the memory texts, so a
    bad ``texts[i]`` was reported as ``texts[i + 1]`` and a bad query as ``texts[0]``;
    ``texts=None`` scored nothing instead of failing."""
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    emb = MiniLMEmbedder()
    scorer = PairScorer(init_cross_encoder(emb.model), emb, max_length=32)
    with pytest.raises(TypeError, match=r"^text \(texts\[1\]\) must be str, got int"):
        scorer.score("q", ["ok", 5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"^text \(texts\[1\]\) is not valid Unicode"):
        scorer.score("q", ["ok", "\ud800"])
    with pytest.raises(ValueError, match=r"^query is not valid Unicode"):
        scorer.score("\ud800", ["ok"])
    with pytest.raises(TypeError, match=r"^texts must be a sequence of str, got NoneType"):
        scorer.score("q", None)  # type: ignore[arg-type]
    assert scorer.score("q", []).shape == (0,)
    tiny = PairScorer(init_cross_encoder(tiny_model(0)), TinyEmbedder(), max_length=32)
    with pytest.raises(TypeError, match=r"^text \(texts\[0\]\) must be str, got bytes"):
        tiny.score("q", [b"x"])  # type: ignore[list-item]
