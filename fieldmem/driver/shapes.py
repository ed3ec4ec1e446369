"""Array shapes: the abstract arguments of ``--shapes``, and the bytes of a shape.

Nothing is allocated here; jax is imported on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["dtype_name", "shape_bytes", "shape_structs"]


def shape_structs(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[Any, ...]:
    """``jax.ShapeDtypeStruct`` for each parsed ``--shapes`` entry (nothing allocated)."""
    import jax

    # jnp.dtype knows bfloat16 and the other ml_dtypes by name; numpy does not
    return tuple(jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype)) for dtype, shape in shapes)


def _is_extended(dtype: Any) -> bool:
    """A jax extended dtype (a typed PRNG key's ``key<fry>``): no numpy dtype."""
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


def dtype_name(dtype: Any) -> str:
    """The report's name of ``dtype``: numpy's (``float32``, ``float8_e4m3fn``, ``int4``), or jax's for an
    extended dtype (``key<fry>``)."""
    import numpy as np

    return str(dtype) if _is_extended(dtype) else np.dtype(dtype).name


def shape_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes of an array of ``shape`` and ``dtype`` as XLA stores it (int64 arithmetic: pod-scale shapes
    do not overflow).

    Sub-byte types (``int4``, ``float4_e2m1fn``) are packed, two to a byte;
    an extended dtype takes the bytes of its physical form (a ``key<fry>``
    key is two ``uint32``: 8 bytes).
    """
    import jax
    import numpy as np

    count = int(np.prod(shape, dtype=np.int64))
    if _is_extended(dtype):
        return count * int(dtype.itemsize)
    try:
        bits = int(jax.dtypes.itemsize_bits(np.dtype(dtype)))
    except ValueError:  # no bit width (float0, void): numpy's item size
        return count * np.dtype(dtype).itemsize
    return (count * bits + 7) // 8
