"""Array shapes: the abstract arguments of ``--shapes``, and the bytes of a shape.

Nothing is allocated here; jax is imported on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fieldmem.model.errors import ArgumentsError, quoted
from fieldmem.model.units import format_bytes

__all__ = ["check_argument_sizes", "dtype_name", "shape_bytes", "shape_structs"]

# XLA sizes a shape in int64: an array of 2**63 bytes or more aborts the process while it compiles
# ("overflow in static extent product"), and a dimension past int64 is refused by the binding
XLA_MAX_BYTES = 2**63 - 1


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


# dtype -> (the report's name, bits per element (None: numpy's item size in bytes), bytes per element of an
# extended dtype (None: not one)): read from jax and numpy once per dtype, as thousands of leaves share a few
_DTYPES: dict[Any, tuple[str, int | None, int | None]] = {}


def _dtype_facts(dtype: Any) -> tuple[str, int | None, int | None]:
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):  # not seen yet, or unhashable: read it
        pass
    import jax
    import numpy as np

    facts: tuple[str, int | None, int | None]
    if _is_extended(dtype):
        facts = (str(dtype), None, int(dtype.itemsize))
    else:
        try:
            bits: int | None = _bit_width(jax, np.dtype(dtype))
        except ValueError:  # no bit width (float0, void): numpy's item size
            bits = None
        facts = (np.dtype(dtype).name, bits, None)
    try:
        _DTYPES[dtype] = facts
    except TypeError:
        pass
    return facts


def _bit_width(jax: Any, dtype: Any) -> int:
    """The bits of one element of ``dtype`` (4 for int4): ``jax.dtypes.itemsize_bits`` (jax 0.8 and later),
    ``bit_width`` of jax's private dtypes module before it; ml_dtypes' or numpy's where neither is there.

    Raises:
        ValueError: ``dtype`` has no bit width (float0, void).
    """
    read = getattr(jax.dtypes, "itemsize_bits", None)
    if read is None:
        try:
            from jax._src import dtypes as private

            read = getattr(private, "bit_width", None)
        except ImportError:  # pragma: no cover - a jax without it
            read = None
    if read is not None:
        return int(read(dtype))
    if dtype.kind != "V":  # numpy's own types
        return int(dtype.itemsize) * 8
    import ml_dtypes

    for info in (ml_dtypes.iinfo, ml_dtypes.finfo):  # int4, bfloat16, float8_*: numpy sees them as void
        try:
            return int(info(dtype).bits)
        except (TypeError, ValueError):
            continue
    raise ValueError(f"no bit width: {dtype}")


def dtype_name(dtype: Any) -> str:
    """The report's name of ``dtype``: numpy's (``float32``, ``float8_e4m3fn``, ``int4``), or jax's for an
    extended dtype (``key<fry>``)."""
    return _dtype_facts(dtype)[0]


def shape_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes of an array of ``shape`` and ``dtype`` as XLA stores it (int64 arithmetic: pod-scale shapes
    do not overflow).

    Sub-byte types (``int4``, ``float4_e2m1fn``) are packed, two to a byte;
    an extended dtype takes the bytes of its physical form (a ``key<fry>``
    key is two ``uint32``: 8 bytes).
    """
    count = 1
    for dim in shape:
        count *= int(dim)
    if not 0 <= count < 2**63:  # past int64: as XLA's int64 product (numpy's) wraps
        import numpy as np

        count = int(np.prod(shape, dtype=np.int64))
    _, bits, extended = _dtype_facts(dtype)
    if extended is not None:
        return count * extended
    if bits is None:
        import numpy as np

        return count * np.dtype(dtype).itemsize
    return (count * bits + 7) // 8


def _exact_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes of ``shape`` x ``dtype`` in exact integer arithmetic (no int64 to overflow)."""
    import numpy as np

    count = 1
    for dim in shape:
        count *= int(dim)
    _, bits, extended = _dtype_facts(dtype)
    if extended is not None:
        return count * extended
    if bits is None:
        return count * np.dtype(dtype).itemsize
    return (count * bits + 7) // 8


def _argument_label(path: Any, names: Sequence[str]) -> str:
    """``argument 'state'``, ``argument 0``, ``keyword 'x'``, then the leaf inside it (``['w']``)."""
    import jax

    if not path:
        return "an argument"
    top, rest = path[0], path[1:]
    inner = jax.tree_util.keystr(tuple(rest)) if rest else ""
    index = getattr(top, "idx", None)
    key = getattr(top, "key", None)
    if index is not None and len(path) > 1:  # (args, kwargs) -> args[i]
        second = path[1]
        position = getattr(second, "idx", None)
        keyword = getattr(second, "key", None)
        inner = jax.tree_util.keystr(tuple(path[2:])) if len(path) > 2 else ""
        if index == 0 and position is not None:
            name = names[position] if position < len(names) else None
            return (f"argument {name!r}" if name else f"argument {position}") + inner
        if keyword is not None:
            return f"keyword argument {keyword!r}" + inner
    return f"argument {key if key is not None else index}" + inner


def check_argument_sizes(args: tuple[Any, ...], kwargs: dict[str, Any], names: Sequence[str] = ()) -> None:
    """Refuse, before XLA sees them, array arguments XLA cannot hold (it would abort the whole process).

    Every leaf with a ``shape`` and a ``dtype`` (arrays, ``ShapeDtypeStruct``,
    from ``--shapes``, the config or an args factory) must have dimensions
    that fit in int64 and a size below 2**63 bytes.

    Raises:
        ArgumentsError: a dimension or a size past what XLA can hold, naming the argument.
    """
    import jax

    tree = (tuple(args), dict(kwargs))
    leaves = jax.tree_util.tree_leaves(tree)

    def path(n: int) -> Any:  # named only when refused: thousands of leaves pass
        return jax.tree_util.tree_flatten_with_path(tree)[0][n][0]

    for n, leaf in enumerate(leaves):
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is None or dtype is None or not isinstance(shape, tuple):
            continue
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            continue  # a symbolic or odd dimension: jax says what is wrong with it
        for dim in shape:
            if dim > XLA_MAX_BYTES or dim < 0:
                raise ArgumentsError(
                    f"{_argument_label(path(n), names)} has the dimension {quoted(dim)}: XLA's dimensions are "
                    f"0 to 2**63 - 1 (shape {quoted(shape)})"
                )
        try:
            size = _exact_bytes(shape, dtype)
        except (TypeError, ValueError):
            continue
        if size > XLA_MAX_BYTES or (shape and _element_count(shape) > XLA_MAX_BYTES):
            label = _argument_label(path(n), names)
            raise ArgumentsError(
                f"{label} ({dtype_name(dtype)}{list(shape)}) is {format_bytes(size)}: XLA cannot hold an "
                "array of 2**63 bytes or more (compiling it would abort the process); give a smaller shape"
            )


def _element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
