"""Library jit wrappers: the ``jax.jit`` a wrapper compiles through, with the exact arguments it receives.

fieldmem analyses the program the user runs. A target that is a library's jit
wrapper runs an *inner* ``jax.jit`` on arguments the wrapper builds from the
user's; :func:`unwrap_call` recognises the wrappers fieldmem understands and
returns that inner jit, its arguments, and a naming of the argument and output
leaves in the user's terms (``model.l1.kernel``, ``opt.opt_state[0].mu.l1.kernel``):

- ``flax.nnx.jit`` (graph mode, flax's default): the graph nodes become
  ``NodeStates`` (``JitWrapped._get_pure_args_kwargs``, inside
  ``graphlib.update_context`` as the wrapper calls it); the inner jit donates
  what the user's ``nnx.jit`` donates, and its outputs are the updated state of
  every graph-node argument and the return value.
- ``equinox.filter_jit``: arrays are split from everything else
  (``equinox._jit._preprocess``); the inner jit donates the donated part
  (``donate="all"``, ``"warn"``: every array; ``"all-except-first"``,
  ``"warn-except-first"``: every array but the first argument's; ``"none"``:
  nothing), and returns ``(marker, arrays, static)``.
- a ``jax.jit`` reached through an instance (``solver.advance``, a bound
  method whose ``self`` is static) and ``functools.partial`` of any of these.

Anything else that compiles on its own (a callable with ``lower``/``trace``,
a function wrapping a jit or a pmap) is refused with one line naming it
(:class:`~fieldmem.errors.TargetError`), never analysed as another program.
Recognising wrappers happens here only. The private attributes read
(``JitWrapped.jitted_fn``, ``_get_pure_args_kwargs``, ``_JitWrapper._cached``,
``equinox._jit._preprocess``) are read here only; a version without them is
refused in words.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fieldmem.driver.paths import path_string
from fieldmem.errors import TargetError

__all__ = ["LeafNames", "WrappedCall", "unwrap_call"]

# a name for each input leaf: (slot, path_string of its path inside the slot) -> (argument, display path)
InputNames = dict[tuple[Any, str], tuple[str, str]]


@dataclass(frozen=True)
class LeafNames:
    """How the inner program's leaves read in the user's terms."""

    inputs: InputNames
    # the output leaves' names in jax's flattening order, from the lowered ``out_info`` (None: keep jax's)
    outputs: Callable[[Any], list[str] | None] | None = None
    # the inner program's outputs (a pytree of ShapeDtypeStruct) -> what the wrapper returns to the user
    # (a chain's next arguments); None: the same
    returned: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class WrappedCall:
    """The jit a wrapper compiles through and what it calls that jit with."""

    kind: str  # "flax.nnx.jit", "equinox.filter_jit", "jitted method", "functools.partial"
    jit: Any  # the inner jax.jit object: its own static and donated arguments are the wrapper's
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    names: LeafNames | None = None  # None: the inner jit's arguments are the user's
    positional_names: tuple[str, ...] | None = None  # the inner positions in words (None: its signature's)
    context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None  # around every lowering
    argument_items: bool = True  # --donate/--static numbers and names mean the inner jit's arguments


def _is_jax_jit(fn: Any) -> bool:
    return getattr(fn, "_jit_info", None) is not None and hasattr(fn, "lower") and not isinstance(fn, types.MethodType)


def _type_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_nnx_jit(fn: Any) -> bool:
    return _type_name(fn) == "flax.nnx.transforms.compilation.JitWrapped"


def _is_eqx_jit(fn: Any) -> bool:
    return _type_name(fn) == "equinox._jit._JitWrapper"


def _is_partial(fn: Any) -> bool:
    return isinstance(fn, functools.partial) or _type_name(fn) == "equinox._module._prebuilt.Partial"


def unwrap_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall | None:
    """The inner jit of a wrapper target and its arguments; None for a plain function or ``jax.jit`` object.

    Raises:
        TargetError: ``fn`` compiles through something fieldmem cannot map (``jax.pmap``,
            ``eqx.filter_pmap``, ``nnx.pmap``, a function wrapping a jit, an unknown class with ``lower``).
    """
    if _is_jax_jit(fn):
        return None
    if _is_partial(fn):
        inner_args = tuple(fn.args) + tuple(args)
        inner_kwargs = {**dict(fn.keywords), **kwargs}
        inner = unwrap_call(fn.func, inner_args, inner_kwargs)
        if inner is not None:
            return inner
        if _is_jax_jit(fn.func):
            return WrappedCall("functools.partial", fn.func, inner_args, inner_kwargs)
        _refuse_hidden_compile(fn.func, fn)
        return None
    if isinstance(fn, types.MethodType) and _compiles(fn.__func__):
        inner = unwrap_call(fn.__func__, (fn.__self__, *args), kwargs)
        if inner is not None:
            return inner
        return WrappedCall("jitted method", fn.__func__, (fn.__self__, *args), dict(kwargs))
    if _is_nnx_jit(fn):
        return _nnx_jit(fn, args, kwargs)
    if _is_eqx_jit(fn):
        return _eqx_jit(fn, args, kwargs)
    _refuse_hidden_compile(fn, fn)
    return None


# ---- what fieldmem cannot map --------------------------------------------------------------------------


def _compiles(obj: Any) -> bool:
    """Whether ``obj`` is a callable that compiles by itself (has ``lower`` or ``trace``)."""
    return callable(obj) and not isinstance(obj, type) and (hasattr(obj, "lower") or hasattr(obj, "trace"))


def _describe(obj: Any) -> str:
    """``obj`` in words: what the user would recognise it as."""
    code = getattr(obj, "__code__", None)
    where = getattr(code, "co_filename", "") or ""
    qualname = getattr(code, "co_qualname", "") or ""
    if "jax/_src/pmap.py" in where.replace("\\", "/") or type(obj).__name__ == "PmapFunction":
        return "jax.pmap"
    name = _type_name(obj)
    known = {
        "equinox._vmap_pmap._PmapWrapper": "equinox.filter_pmap",
        "flax.nnx.transforms.compilation.SimpleJitWrapped": "flax.nnx.jit(graph=False or graph_updates=False)",
        "flax.nnx.transforms.compilation.SimpleJitPartialWrapped": "flax.nnx.jit_partial",
    }
    if name in known:
        return known[name]
    if isinstance(obj, types.FunctionType):
        library = _library_of(where)
        if library is not None:  # functools.wraps gave it the user's names: say whose code it is
            return f"a {library} function wrapper ({qualname})"
        return f"function {getattr(obj, '__module__', None) or '?'}.{obj.__qualname__}"
    return f"a {name}"


def _library_of(file: str) -> str | None:
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
    library = _library_of(getattr(getattr(fn, "__code__", None), "co_filename", "") or "")
    for cell in (getattr(fn, "__closure__", None) or ()) if library is not None else ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if _compiles(value):
            return value
        if isinstance(value, types.FunctionType) and (found := _compiling_inside(value, depth + 1, seen)):
            return found
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None and not isinstance(wrapped, type):
        if _compiles(wrapped):
            return wrapped
        return _compiling_inside(wrapped, depth + 1, seen)
    return None


def _refuse_hidden_compile(fn: Any, target: Any) -> None:
    """Raise when ``fn`` compiles through something fieldmem cannot map; return for a plain function.

    Raises:
        TargetError: one line naming the wrapper.
    """
    if _compiles(fn):
        raise TargetError(
            f"{_describe(fn)} is a compiled-function wrapper fieldmem cannot analyse faithfully: "
            "point fieldmem at a jax.jit, flax.nnx.jit or equinox.filter_jit function "
            "(or the plain function, to analyse it under jax.jit)"
        )
    if isinstance(fn, types.FunctionType) and getattr(fn, "__wrapped__", None) is not None:
        found = _compiling_inside(fn)
        if found is not None:
            raise TargetError(
                f"{_describe(target)} wraps {_describe(found) if not _is_jax_jit(found) else 'a jax.jit'}, "
                "which fieldmem cannot see through (jitting the wrapper would analyse another program): "
                "point fieldmem at the jitted function itself"
            )


# ---- naming --------------------------------------------------------------------------------------------


def _key_text(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    return f"[{key!r}]"


def _array_of(leaf: Any) -> Any:
    """The array behind a leaf (an nnx Variable holds its array as its raw value)."""
    raw = getattr(leaf, "get_raw_value", None)
    if callable(raw):
        try:
            return raw()
        except Exception:
            return leaf
    return leaf


def _names_by_identity(user_leaves: list[tuple[str, str, Any]], slots: list[tuple[Any, Any]]) -> InputNames:
    """Name each inner argument leaf after the place the same array has in the user's arguments.

    ``user_leaves``: (argument, display path, leaf) of the user's arguments;
    ``slots``: (slot, value) of the inner jit's arguments. The wrappers pass the
    user's arrays through unchanged, so the array object tells where it came from.
    """
    import jax

    where: dict[int, tuple[str, str]] = {}
    for argument, display, user_leaf in user_leaves:
        where.setdefault(id(_array_of(user_leaf)), (argument, display))
    names: InputNames = {}
    for slot, value in slots:
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            found = where.get(id(leaf))
            if found is not None:
                names[(slot, path_string(path))] = found
    return names


def _pytree_leaves(named: list[tuple[str, Any]]) -> list[tuple[str, str, Any]]:
    import jax

    result = []
    for argument, value in named:
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            result.append((argument, argument + path_string(path), leaf))
    return result


def _parameter_names(fn: Any, count: int, kwargs: dict[str, Any]) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    return [positional[i] if i < len(positional) else f"{star}[{i - len(positional)}]" for i in range(count)]


# ---- flax.nnx.jit --------------------------------------------------------------------------------------


def _nnx_jit(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall:
    try:
        from flax.nnx import graphlib

        inner = fn.jitted_fn
        with graphlib.update_context(fn):
            pure_args, pure_kwargs = fn._get_pure_args_kwargs(tuple(args), dict(kwargs))
    except AttributeError as exc:
        raise TargetError(
            f"this flax version's nnx.jit has no {exc.name or 'attribute fieldmem reads'}: "
            "fieldmem cannot see the program it compiles"
        ) from exc
    user_fn = getattr(fn, "fun", None) or getattr(fn, "__wrapped__", fn)
    arg_names = _parameter_names(user_fn, len(args), kwargs)
    # the user's arrays with their paths through graph nodes (nnx's own flattening) and pytrees
    user_leaves: list[tuple[str, str, Any]] = []
    for argument, value in [*zip(arg_names, args), *kwargs.items()]:
        user_leaves.extend(_nnx_leaves(graphlib, argument, value))
    slots = [*enumerate(pure_args), *pure_kwargs.items()]
    names = _names_by_identity(user_leaves, slots)

    def context() -> contextlib.AbstractContextManager[Any]:
        return graphlib.update_context(fn)

    def outputs(out_info: Any) -> list[str] | None:
        return _nnx_output_names(out_info, pure_args, pure_kwargs, names, arg_names)

    def returned(structs: Any) -> Any:
        return structs[2]  # (args_out, kwargs_out, out): the graph nodes are updated, out is returned

    return WrappedCall(
        "flax.nnx.jit",
        inner,
        tuple(pure_args),
        dict(pure_kwargs),
        names=LeafNames(names, outputs, returned),
        positional_names=tuple(arg_names),
        context=context,
    )


def _nnx_leaves(graphlib: Any, argument: str, value: Any) -> list[tuple[str, str, Any]]:
    """(argument, path, leaf) of every array in ``value``, graph nodes walked as nnx walks them."""
    try:
        _, flat = graphlib.flatten(value, with_paths=True)
    except Exception:
        return _pytree_leaves([(argument, value)])
    return [(argument, argument + "".join(_key_text(k) for k in path), leaf) for path, leaf in flat]


def _nnx_output_names(
    out_info: Any,
    pure_args: tuple[Any, ...],
    pure_kwargs: dict[str, Any],
    names: InputNames,
    arg_names: list[str],
) -> list[str] | None:
    """Names of the nnx.jit program's outputs ``(args_out, kwargs_out, out)``: a graph-node argument's
    updated state under the argument's own paths (``model.l1.kernel``), the return value under ``out``."""
    import jax

    tree = jax.tree_util
    try:
        args_out, kwargs_out, out = out_info
    except (TypeError, ValueError):
        return None
    result: list[str] = []
    for slot, value, before in [
        *((i, v, pure_args[i] if i < len(pure_args) else None) for i, v in enumerate(args_out)),
        *((k, v, pure_kwargs.get(k)) for k, v in kwargs_out.items()),
    ]:
        leaves = tree.tree_flatten_with_path(value)[0]
        ins = tree.tree_flatten_with_path(before)[0] if before is not None else []
        same = len(ins) == len(leaves) and all(
            getattr(a, "shape", None) == getattr(b, "shape", None) for (_, a), (_, b) in zip(ins, leaves)
        )
        label = arg_names[slot] if isinstance(slot, int) and slot < len(arg_names) else str(slot)
        for n, (path, _) in enumerate(leaves):
            named = names.get((slot, path_string(ins[n][0]))) if same else None
            result.append(named[1] if named else f"{label} (updated){path_string(path)}")
    result.extend("out" + path_string(path) for path, _ in tree.tree_flatten_with_path(out)[0])
    return result


# ---- equinox.filter_jit --------------------------------------------------------------------------------

_EQX_SLOTS = ("arrays donated by filter_jit", "arrays filter_jit does not donate", "non-arrays (static)")


def _eqx_jit(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall:
    try:
        from equinox import _jit as eqx_jit

        info = (fn._signature, fn._dynamic_fun, fn._static_fun, fn.donate_first, fn.donate_rest)
        dynamic_donate, dynamic_nodonate, static = eqx_jit._preprocess(info, args, kwargs, return_static=True)
        inner = fn._cached
        bound = fn._signature.bind(*args, **kwargs)
    except AttributeError as exc:
        raise TargetError(
            f"this equinox version's filter_jit has no {exc.name or 'attribute fieldmem reads'}: "
            "fieldmem cannot see the program it compiles"
        ) from exc
    except TypeError as exc:
        raise TargetError(f"equinox.filter_jit cannot bind the example arguments: {exc}") from exc
    user_leaves = _pytree_leaves([*bound.arguments.items()])
    function = getattr(fn, "__wrapped__", None)
    label = getattr(function, "__qualname__", None) or "the function"
    user_leaves.extend(_pytree_leaves([(label, fn._dynamic_fun)]))
    names = _names_by_identity(user_leaves, [(0, dynamic_donate), (1, dynamic_nodonate)])

    def outputs(out_info: Any) -> list[str] | None:
        import jax

        try:
            _marker, dynamic_out, _static = out_info
        except (TypeError, ValueError):
            return None
        paths = ["out" + path_string(p) for p, _ in jax.tree_util.tree_flatten_with_path(dynamic_out)[0]]
        return ["filter_jit's marker", *paths]

    def returned(structs: Any) -> Any:
        return eqx_jit._postprocess(structs)  # the arrays combined with the static part, as filter_jit returns

    return WrappedCall(
        "equinox.filter_jit",
        inner,
        (dynamic_donate, dynamic_nodonate, static),
        {},
        names=LeafNames(names, outputs, returned),
        positional_names=_EQX_SLOTS,
        argument_items=False,
    )
