"""Array shapes: the abstract arguments of ``--shapes``, and the bytes of a shape.

Nothing is allocated here; jax is imported on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["shape_bytes", "shape_structs"]


def shape_structs(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[Any, ...]:
    """``jax.ShapeDtypeStruct`` for each parsed ``--shapes`` entry (nothing allocated)."""
    import jax

    # jnp.dtype knows bfloat16 and the other ml_dtypes by name; numpy does not
    return tuple(jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype)) for dtype, shape in shapes)


def shape_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes of an array of ``shape`` and ``dtype`` (int64 arithmetic: pod-scale shapes do not overflow)."""
    import numpy as np

    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
