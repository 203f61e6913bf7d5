"""A tiny randomly initialised BERT in the MiniLM code path (tests of the tuner)."""

from __future__ import annotations

import zlib

import numpy as np

from emotional_memory.embedders.minilm import MiniLMModel

TINY = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 3, "num_attention_heads": 2,
        "intermediate_size": 16, "max_position_embeddings": 64, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12}


def tiny_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """Random BERT tensors under Hugging Face names (weights (out, in))."""
    rng = np.random.default_rng(seed)
    h, i = TINY["hidden_size"], TINY["intermediate_size"]

    def r(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": r(TINY["vocab_size"], h, scale=1.0),
        "embeddings.position_embeddings.weight": r(TINY["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": r(2, h),
        "embeddings.LayerNorm.weight": 1 + r(h, scale=0.1),
        "embeddings.LayerNorm.bias": r(h, scale=0.1),
    }
    for n in range(TINY["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            t[p + name + ".weight"] = r(h, h)
            t[p + name + ".bias"] = r(h, scale=0.1)
        t[p + "intermediate.dense.weight"] = r(i, h)
        t[p + "intermediate.dense.bias"] = r(i, scale=0.1)
        t[p + "output.dense.weight"] = r(h, i)
        t[p + "output.dense.bias"] = r(h, scale=0.1)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + ln + ".weight"] = 1 + r(h, scale=0.1)
            t[p + ln + ".bias"] = r(h, scale=0.1)
    return t


def tiny_model(seed: int = 0) -> MiniLMModel:
    return MiniLMModel.from_state_dict(tiny_tensors(seed), TINY)


class TinyEmbedder:
    """What the tuner needs of an embedder: ``model`` and ``tokenize`` (word hashes)."""

    def __init__(self, seed: int = 0) -> None:
        self.model = tiny_model(seed)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [[1, *[5 + zlib.crc32(w.lower().encode()) % 35 for w in t.split()][:24], 2]
                for t in texts]
