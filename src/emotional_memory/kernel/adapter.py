"""The opt-in query adapter: a learned linear map of the query embedding.

``adapt(q) = q + left @ (right.T @ q)``: the identity plus a rank-R product (R = D is
full rank). Only the query moves; memory vectors are untouched, so every store's index
stays valid and the adapted query is what the store searches and what s1 scores.
With ``left`` zero the map is the identity bit for bit (``q + 0``).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Float

from emotional_memory.kernel._types import Array


class QueryAdapter(eqx.Module):
    """The factors of the map ``q -> q + left @ (right.T @ q)``.

    Attributes:
        left: (D, R) output factor.
        right: (D, R) input factor.
    """

    left: Float[Array, "D R"]
    right: Float[Array, "D R"]

    @property
    def dim(self) -> int:
        """D, the embedding dimension the adapter maps."""
        return int(jnp.shape(self.left)[0])

    @property
    def rank(self) -> int:
        """R, the rank of the learned product."""
        return int(jnp.shape(self.left)[1])


def adapt_query(
    adapter: QueryAdapter, embedding: Float[Array, "... D"]
) -> Float[Array, "... D"]:
    """Apply the adapter to one query or a batch of queries.

    Args:
        adapter: the factors (D, R).
        embedding: (..., D) query embeddings.

    Returns:
        (..., D) adapted embeddings, in the dtype of ``embedding``.
    """
    dtype = jnp.result_type(embedding)
    left = jnp.asarray(adapter.left, dtype)
    right = jnp.asarray(adapter.right, dtype)
    inner = jnp.einsum("...d,dr->...r", embedding, right)
    return embedding + jnp.einsum("...r,dr->...d", inner, left)
