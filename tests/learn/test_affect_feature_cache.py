"""``python -m training affect --cache``: the pooled MiniLM features are cached in
the very file named (``np.savez`` alone would add ``.npz`` to a name without it, so
the cache was never found again), written whole, and a cache that cannot be read (a
half-written or foreign file) is recomputed, not a traceback. The MiniLM is replaced
by a counting stand-in, so the test runs in a moment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from support.paths import ROOT


class CountingMiniLM:
    """Pooled "states" derived from the texts' lengths; counts its batches."""

    dim = 4
    calls = 0

    def pooled_layers(self, texts: list[str]) -> np.ndarray:
        type(self).calls += 1
        lengths = np.asarray([len(t) for t in texts], np.float32)
        return np.broadcast_to(lengths[:, None, None, None], (len(texts), 6, 2, 4)).copy()


@pytest.fixture
def features(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT))
    from training import affect

    import emotional_memory.embedders.minilm as minilm

    CountingMiniLM.calls = 0
    monkeypatch.setattr(minilm, "MiniLMEmbedder", CountingMiniLM)
    return affect._features


@pytest.mark.parametrize("name", ["features", "features.npz", "features.cache"])
def test_the_cache_is_the_file_named_and_is_read_back(features: Any, tmp_path: Path,
                                                      name: str) -> None:
    cache = tmp_path / name
    texts = ["calm sea", "a storm", "joy"]
    first = features(texts, str(cache), False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    again = features(texts, str(cache), False)
    assert CountingMiniLM.calls == 1  # the second run read the cache
    np.testing.assert_array_equal(again, first)
    assert first.shape == (3, 6, 2, 4) and first[1, 0, 0, 0] == len("a storm")


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 half a zip", b"not an archive"])
def test_a_cache_that_cannot_be_read_is_recomputed_and_rewritten(
    features: Any, tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "features.npz"
    cache.write_bytes(content)
    texts = ["calm sea", "a storm"]
    got = features(texts, str(cache), False)
    assert CountingMiniLM.calls == 1
    assert "features.npz" in capsys.readouterr().err  # says why it recomputes
    np.testing.assert_array_equal(features(texts, str(cache), False), got)
    assert CountingMiniLM.calls == 1  # the rewritten cache is read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.npz"]


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_a_cache_that_cannot_be_written_is_refused_before_the_work(
    features: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """``--cache`` in a folder that does not exist (or naming a folder) failed only
    after the MiniLM pass over every text (minutes); now before EmoBank is read."""
    from training.cli import main

    cache = tmp_path / "nowhere" / "features.npz" if where == "missing folder" else tmp_path
    csv = tmp_path / "emobank.csv"
    csv.write_text("id,split,V,A,D,text\n1,train,3,3,3,calm sea\n2,dev,4,2,3,a storm\n",
                   encoding="utf-8")
    argv = ["affect", "--emobank", str(csv), "--out", str(tmp_path / "head.npz"),
            "--cache", str(cache), "--quick", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    named = cache.parent if where == "missing folder" else cache
    assert err.startswith("error: --cache") and str(named) in err
    assert CountingMiniLM.calls == 0  # refused before the features
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emobank.csv"]


@pytest.mark.parametrize(("row", "named"), [
    ("3,train,nan,3,3,calm sea", "'V'"),
    ("3,train,3,inf,3,calm sea", "'A'"),
    ("3,train,3,3,seven,calm sea", "'D'"),
    ("3,train,3,3,9,calm sea", "'D'"),
    ("3,train,3,3", "'D'"),
])
def test_an_emobank_rating_that_is_no_number_on_its_scale_names_the_row(
    features: Any, tmp_path: Path, row: str, named: str
) -> None:
    """A NaN or infinite rating was read as it is (the head then trained on NaN and
    was written); text, a number off EmoBank's 1-5 scale, or a short row gave an
    error naming neither the file nor the row."""
    from training.affect import load_emobank

    csv = tmp_path / "emobank.csv"
    csv.write_text(f"id,split,V,A,D,text\n1,train,3,3,3,fine\n{row}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"emobank.csv.* row 3: {named}"):
        load_emobank(csv)


@pytest.mark.parametrize(("content", "named"), [
    (b"id,split,V,A\n1,train,3,3\n", "lacks the column(s) ['D', 'text']"),
    (b"id,split,V,A,D,text\n1,train,3,3,3,h\xe9llo\n", "not UTF-8"),
])
def test_an_emobank_csv_without_its_columns_or_not_utf8_names_the_file(
    tmp_path: Path, content: bytes, named: str
) -> None:
    """Missing columns were a KeyError (printed by the command line inside quotes) and
    a Latin-1 file a bare "'utf-8' codec can't decode byte", neither naming the file."""
    from training.affect import load_emobank

    csv = tmp_path / "emobank.csv"
    csv.write_bytes(content)
    with pytest.raises(ValueError, match=r"emobank\.csv") as caught:
        load_emobank(csv)
    assert named in str(caught.value) and not str(caught.value).startswith('"')
