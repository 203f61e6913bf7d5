"""A very long text costs MiniLM only the prefix its ``max_length`` tokens come from.

Needs the real MiniLM (``make minilm``): the ids must equal those of the model's own
tokenizer run over the whole text.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.minilm import require_minilm


class _Spy:
    """Delegates to a ``tokenizers.Tokenizer``, counting the characters it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chars = 0

    def encode(self, text: str) -> Any:
        self.chars += len(text)
        return self.inner.encode(text)

    def encode_batch(self, texts: list[str]) -> Any:
        self.chars += sum(len(t) for t in texts)
        return self.inner.encode_batch(texts)


@pytest.fixture(scope="module")
def emb() -> Any:
    """A MiniLM embedder with a short ``max_length`` (cheap full-text references)."""
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(max_length=32)


def _reference(emb: Any, text: str) -> list[int]:
    """The ids of the model's tokenizer over the whole (stripped) text."""
    return list(emb._tokenizer.encode(text.strip()).ids)


def test_a_huge_text_is_tokenised_from_a_bounded_prefix(emb: Any) -> None:
    text = "the quick brown fox jumps over the lazy dog " * 100_000  # 4.4 MB
    spy = _Spy(emb._tokenizer)
    emb._tokenizer = spy
    try:
        ids = emb.tokenize([text, "short"])
    finally:
        emb._tokenizer = spy.inner
    assert ids[0] == _reference(emb, text)
    assert len(ids[0]) == 32
    assert spy.chars < 10_000  # not the 4.4 million characters


@pytest.mark.parametrize("text", [
    "supercalifragilistic" * 40 + " tail",  # one word far longer than the first cut
    " ".join(["antidisestablishmentarianism"] * 300),  # cuts land inside words
    "word " + " " * 50_000 + "after a long run of spaces " * 40,  # the cut must grow
    "a\x00" * 30_000 + " b" * 100,  # control characters the normaliser drops
    "e\u0301" * 3_000 + " x" * 100,  # combining accents the normaliser strips
    "東京タワー" * 2_000,  # CJK characters: one word each, no spaces
    "x" * 100_000,  # one word, no space anywhere
    "ok, " * 5_000 + "!" * 3_000,
])
def test_long_texts_give_the_ids_of_the_whole_text(emb: Any, text: str) -> None:
    assert emb.tokenize([text])[0] == _reference(emb, text)
    assert emb.tokenize([text.strip()]) == emb.tokenize(["  " + text + "\n"])


def test_a_lone_surrogate_past_the_prefix_is_still_refused(emb: Any) -> None:
    text = "plenty of words here " * 10_000 + "\ud800"
    with pytest.raises(ValueError, match=r"text \(texts\[1\]\) is not valid Unicode"):
        emb.tokenize(["fine", text])
    with pytest.raises(ValueError, match="not valid Unicode"):
        emb.embed(text)


def test_the_shortest_max_length_keeps_no_word_piece_of_a_long_text() -> None:
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    tiny = MiniLMEmbedder(max_length=2)
    assert tiny.tokenize(["many words " * 100, "x" * 100]) == [[101, 102], [101, 102]]


def test_a_tokenizer_with_a_spaced_added_token_gets_the_ids_of_the_whole_text(
    tmp_path: Any,
) -> None:
    """The prefix ended after a whitespace following the kept word pieces, taken as
    the end of their word; a tokenizer.json whose added token holds a space ("new
    york") matches it across that space in the whole text, so a prefix cut between
    "new " and "york" gave the piece of "new" where the whole text has the added
    token's id."""
    require_minilm()
    import json

    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    installed = default_model_dir()
    assert installed is not None
    made = tmp_path / "model"
    made.mkdir()
    for file in ("model.safetensors", "config.json"):
        (made / file).symlink_to(installed / file)
    data = json.loads((installed / "tokenizer.json").read_text(encoding="utf-8"))
    mask = next(t for t in data["added_tokens"] if t["content"] == "[MASK]")
    mask.update(content="new york", special=False, normalized=True)
    vocab = data["model"]["vocab"]
    vocab["new york"] = vocab.pop("[MASK]")
    (made / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    emb = MiniLMEmbedder(made, max_length=8)
    # the first prefix (16 x 8 = 128 characters) ends with "new ": 6 pieces, a space
    text = "a b c d e" + " " * 115 + "new york " + "z " * 200
    assert emb.tokenize([text])[0] == _reference(emb, text)
    assert _reference(emb, text)[-2] == mask["id"]
