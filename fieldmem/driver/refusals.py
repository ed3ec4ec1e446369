"""What compiles by itself, and the wrappers fieldmem refuses, each in one line naming it.

A callable with ``lower`` or ``trace`` that :func:`fieldmem.driver.wrappers.unwrap_call`
cannot map to the jit it compiles through (a ``shard_map`` or a function
wrapping a jit, ``nnx.pmap(graph=False)``, an unknown class) is refused here
(:class:`~fieldmem.model.errors.TargetError`), never analysed as another
program; the tests that tell a callable's kind from its type, its code's file
and what it closes over are here too, for the wrappers' readers to share.
"""

from __future__ import annotations

import types
from typing import Any

from fieldmem.model.errors import TargetError


def is_jax_jit(fn: Any) -> bool:
    return getattr(fn, "_jit_info", None) is not None and hasattr(fn, "lower") and not isinstance(fn, types.MethodType)


def type_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def compiles_by_itself(obj: Any) -> bool:
    """Whether ``obj`` is a callable that compiles by itself (has ``lower`` or ``trace``)."""
    return callable(obj) and not isinstance(obj, type) and (hasattr(obj, "lower") or hasattr(obj, "trace"))


def _describe(obj: Any) -> str:
    """``obj`` in words: what the user would recognise it as."""
    code = getattr(obj, "__code__", None)
    where = getattr(code, "co_filename", "") or ""
    qualname = getattr(code, "co_qualname", "") or ""
    if "jax/_src/pmap.py" in where.replace("\\", "/") or type(obj).__name__ == "PmapFunction":
        return "jax.pmap"
    name = type_name(obj)
    known = {
        "equinox._vmap_pmap._PmapWrapper": "equinox.filter_pmap",
        "flax.nnx.transforms.compilation.SimpleJitWrapped": "flax.nnx.jit(graph=False or graph_updates=False)",
        "flax.nnx.transforms.compilation.SimpleJitPartialWrapped": "flax.nnx.jit_partial",
    }
    if name in known:
        return known[name]
    if isinstance(obj, types.FunctionType):
        library = library_of(where)
        if library == "flax" and qualname.endswith("simple_pmap_wrapper"):
            return "flax.nnx.pmap(graph=False or graph_updates=False)"
        if _is_shard_map(obj):
            return "jax.shard_map"
        if library is not None:  # functools.wraps gave it the user's names: say whose code it is
            return f"a {library} function wrapper ({qualname})"
        return f"function {getattr(obj, '__module__', None) or '?'}.{obj.__qualname__}"
    return f"a {name}"


def jax_source(fn: Any, module: str) -> bool:
    """Whether ``fn`` is a function defined in ``jax/_src/<module>``."""
    code = getattr(fn, "__code__", None)
    return code is not None and (code.co_filename or "").replace("\\", "/").endswith(f"jax/_src/{module}")


def _is_shard_map(fn: Any) -> bool:
    """Whether ``fn`` is what ``jax.shard_map(f, ...)`` returns (its ``wrapped``, maybe behind jax's
    ``api_boundary``)."""
    if not isinstance(fn, types.FunctionType):
        return False
    if jax_source(fn, "shard_map.py"):
        return True
    return jax_source(fn, "traceback_util.py") and jax_source(closure_values(fn).get("fun"), "shard_map.py")


def closure_values(fn: Any) -> dict[str, Any]:
    """The values ``fn`` closes over by name (an empty cell left out)."""
    code = getattr(fn, "__code__", None)
    found: dict[str, Any] = {}
    for name, cell in zip(getattr(code, "co_freevars", ()), getattr(fn, "__closure__", None) or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:
            continue
    return found


def library_of(file: str) -> str | None:
    """The top-level package of an installed library ``file`` belongs to (None: not an installed library)."""
    parts = file.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts) - 1:
            return parts[parts.index(marker) + 1]
    return None


def _compiling_inside(fn: Any, depth: int = 0, seen: set[int] | None = None) -> Any | None:
    """Something that compiles by itself inside the decorator ``fn``: along its ``__wrapped__`` chain, or,
    for a library's wrapper, a callable it closes over (how ``nnx.pmap`` holds its ``jax.pmap``; a user's
    own closure over a jitted helper is a call like any other). None when there is none."""
    seen = set() if seen is None else seen
    if id(fn) in seen or depth > 4:
        return None
    seen.add(id(fn))
    library = library_of(getattr(getattr(fn, "__code__", None), "co_filename", "") or "")
    for cell in (getattr(fn, "__closure__", None) or ()) if library is not None else ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if compiles_by_itself(value):
            return value
        if isinstance(value, types.FunctionType) and (found := _compiling_inside(value, depth + 1, seen)):
            return found
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None and not isinstance(wrapped, type):
        if compiles_by_itself(wrapped):
            return wrapped
        return _compiling_inside(wrapped, depth + 1, seen)
    return None


def refuse_hidden_compile(fn: Any, target: Any) -> None:
    """Raise when ``fn`` compiles through something fieldmem cannot map; return for a plain function.

    Raises:
        TargetError: one line naming the wrapper.
    """
    if compiles_by_itself(fn):
        raise TargetError(
            f"{_describe(fn)} is a compiled-function wrapper fieldmem cannot analyse faithfully: "
            "point fieldmem at a jax.jit, jax.pmap, flax.nnx.jit or pmap, or equinox.filter_jit or filter_pmap "
            "function (or the plain function, to analyse it under jax.jit)"
        )
    if isinstance(fn, types.FunctionType) and getattr(fn, "__wrapped__", None) is not None:
        found = _compiling_inside(fn)
        if found is not None and _is_shard_map(fn):
            # measured (jax 0.10): shard_map called outside a jit runs its body op by op on copies of the
            # arguments in its per-device layout; the inner jit donates those, the caller's buffers stay
            raise TargetError(
                f"jax.shard_map around {'a jax.jit' if is_jax_jit(found) else _describe(found)} never reuses "
                "your buffers: called outside a jit, shard_map runs it on copies of the arguments in its "
                "per-device layout, so the inner donation frees only those copies; jit the shard_map instead "
                "(jax.jit(jax.shard_map(f, ...), donate_argnums=...)) and point fieldmem at that"
            )
        if found is not None:
            raise TargetError(
                f"{_describe(target)} wraps {_describe(found) if not is_jax_jit(found) else 'a jax.jit'}, "
                "which fieldmem cannot see through (jitting the wrapper would analyse another program): "
                "point fieldmem at the jitted function itself"
            )
