"""Array type used in kernel annotations: JAX arrays or NumPy arrays (host leaves)."""

import jax
import numpy as np

Array = jax.Array | np.ndarray
