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
- ``jax.pmap``: in jax 0.10 a ``jax.jit`` of a ``shard_map``, with the
  pmap's ``in_shardings``/``out_shardings`` and its ``donate_argnums`` on the
  flattened arguments; the pmap's own ``infer_params`` (a cell of the
  function ``jax.pmap`` returns) gives that jit and those arguments, as the
  pmap's own ``lower`` uses them. The program is the per-device (SPMD) one.
- ``flax.nnx.pmap`` (graph mode): the graph nodes become ``NodeStates``
  (``extract.to_tree`` inside ``update_context('pmap')``, as its wrapper
  calls it), then the ``jax.pmap`` above.
- ``equinox.filter_pmap``: arrays split from the rest (the first lines of
  ``_PmapWrapper._call``), then the ``jax.pmap`` ``_filter_pmap_cache`` gives.
- a ``jax.jit`` reached through an instance (``solver.advance``, a bound
  method whose ``self`` is static) and ``functools.partial`` of any of these.

Anything else that compiles on its own (a callable with ``lower``/``trace``,
a function wrapping a jit, a ``shard_map`` around a jit) is refused with one
line naming it (:class:`~fieldmem.model.errors.TargetError`, in
:mod:`fieldmem.driver.refusals`), never analysed as another program.
Recognising wrappers happens here and there only. The private
attributes read (``JitWrapped.jitted_fn``, ``_get_pure_args_kwargs``,
``_JitWrapper._cached``, ``equinox._jit._preprocess``, the pmap's
``infer_params`` cell, nnx.pmap's ``pmapped_fn``/``in_axes`` cells,
``equinox._vmap_pmap``'s helpers) are read here only; a version without them
is refused in words.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fieldmem.driver.jaxerrors import first_line
from fieldmem.driver.paths import path_string
from fieldmem.driver.refusals import (
    closure_values,
    compiles_by_itself,
    is_jax_jit,
    jax_source,
    library_of,
    refuse_hidden_compile,
    type_name,
)
from fieldmem.model.errors import ArgumentsError, TargetError

__all__ = ["PMAP_KINDS", "LeafNames", "WrappedCall", "unwrap_call"]

#: the wrappers whose program is a pmap's: a jit of a shard_map over the devices jax runs on
PMAP_KINDS = ("jax.pmap", "flax.nnx.pmap", "equinox.filter_pmap")

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

    kind: str  # "flax.nnx.jit", "equinox.filter_jit", "jax.pmap", "jitted method", "functools.partial", ...
    jit: Any  # the inner jax.jit object: its own static and donated arguments are the wrapper's
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    names: LeafNames | None = None  # None: the inner jit's arguments are the user's
    positional_names: tuple[str, ...] | None = None  # the inner positions in words (None: its signature's)
    context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None  # around every lowering
    argument_items: bool = True  # --donate/--static numbers and names mean the inner jit's arguments


def _is_nnx_jit(fn: Any) -> bool:
    return type_name(fn) == "flax.nnx.transforms.compilation.JitWrapped"


def _is_eqx_jit(fn: Any) -> bool:
    return type_name(fn) == "equinox._jit._JitWrapper"


def _is_partial(fn: Any) -> bool:
    return isinstance(fn, functools.partial) or type_name(fn) == "equinox._module._prebuilt.Partial"


def unwrap_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall | None:
    """The inner jit of a wrapper target and its arguments; None for a plain function or ``jax.jit`` object.

    Raises:
        TargetError: ``fn`` compiles through something fieldmem cannot map (a ``shard_map`` or a
            function wrapping a jit, ``nnx.pmap(graph=False)``, an unknown class with ``lower``).
        ArgumentsError: a pmap refuses the example arguments (too few devices for its mapped axis).
    """
    if is_jax_jit(fn):
        return None
    if _is_partial(fn):
        inner_args = tuple(fn.args) + tuple(args)
        inner_kwargs = {**dict(fn.keywords), **kwargs}
        inner = unwrap_call(fn.func, inner_args, inner_kwargs)
        if inner is not None:
            return inner
        if is_jax_jit(fn.func):
            return WrappedCall("functools.partial", fn.func, inner_args, inner_kwargs)
        refuse_hidden_compile(fn.func, fn)
        return None
    if isinstance(fn, types.MethodType) and compiles_by_itself(fn.__func__):
        inner = unwrap_call(fn.__func__, (fn.__self__, *args), kwargs)
        if inner is not None:
            return inner
        return WrappedCall("jitted method", fn.__func__, (fn.__self__, *args), dict(kwargs))
    if _is_nnx_jit(fn):
        return _nnx_jit(fn, args, kwargs)
    if _is_eqx_jit(fn):
        return _eqx_jit(fn, args, kwargs)
    if _is_jax_pmap(fn):
        return _jax_pmap(fn, args, kwargs)
    if _is_eqx_pmap(fn):
        return _eqx_pmap(fn, args, kwargs)
    nnx_pmap = _nnx_pmap_parts(fn)
    if nnx_pmap is not None:
        return _nnx_pmap(fn, nnx_pmap, args, kwargs)
    refuse_hidden_compile(fn, fn)
    return None


def takes_abstract_arguments(fn: Any) -> bool:
    """Whether ``fn`` compiles the same program for ``jax.ShapeDtypeStruct`` arguments as for arrays of their
    shapes (:mod:`fieldmem.driver.traced`): not a wrapper that sorts its arguments by whether they are arrays
    (``equinox.filter_jit`` and ``filter_pmap`` hold a ``ShapeDtypeStruct`` static) or that places them on
    the devices it maps over (the pmaps), behind any partials and methods."""
    while True:
        if _is_partial(fn):
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        else:
            break
    return not (_is_eqx_jit(fn) or _is_eqx_pmap(fn) or _is_jax_pmap(fn) or _nnx_pmap_parts(fn) is not None)


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


# ---- jax.pmap, flax.nnx.pmap, equinox.filter_pmap ------------------------------------------------------


def _is_jax_pmap(fn: Any) -> bool:
    """What ``jax.pmap(f, ...)`` returns: a function of ``jax/_src/pmap.py`` closing over its ``infer_params``."""
    return isinstance(fn, types.FunctionType) and jax_source(fn, "pmap.py") and "infer_params" in closure_values(fn)


def _is_eqx_pmap(fn: Any) -> bool:
    return type_name(fn) == "equinox._vmap_pmap._PmapWrapper"


@dataclass(frozen=True)
class _PmapProgram:
    """The jit a ``jax.pmap`` calls for some arguments, with the flat arguments it is called with."""

    jit: Any  # the pmap's jax.jit of its shard_map, with its in/out shardings and donate_argnums
    flat: tuple[Any, ...]  # the dynamic (non-static) argument leaves, in jax's flattening of (args, kwargs)
    paths: tuple[Any, ...]  # each leaf's key path in (dynamic positional args, kwargs)
    dynamic: tuple[int, ...]  # the positions of the dynamic positional arguments


def _pmap_program(pmapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kind: str) -> _PmapProgram:
    """What ``pmapped(*args, **kwargs)`` runs: the jit and flat arguments its ``infer_params`` gives, which
    its call and its ``lower`` both use (jax 0.10's ``jax.pmap`` is a ``jit`` of a ``shard_map``).

    Raises:
        TargetError: this jax's pmap is not built so, or it spans several processes.
        ArgumentsError: the pmap refuses the arguments (no mapped axis, fewer devices than its size).
    """
    import jax

    try:
        infer = closure_values(pmapped)["infer_params"]
        static = tuple(closure_values(infer)["static_broadcasted_tuple"])
    except KeyError as exc:
        raise TargetError(
            f"this jax version's pmap keeps no {exc.args[0]}: fieldmem cannot see the program {kind} compiles"
        ) from None
    try:
        inferred = infer(*args, **kwargs)
    except Exception as exc:
        raise ArgumentsError(f"{kind} refuses the example arguments: {first_line(exc)}") from exc
    try:
        cached, jitted, flat, _tree, _donated, processes, _clean = inferred
    except (TypeError, ValueError):
        raise TargetError(
            f"this jax version's pmap is built otherwise: fieldmem cannot see the program {kind} compiles"
        ) from None
    if not is_jax_jit(jitted):
        raise TargetError(f"this jax version's pmap calls no jax.jit: fieldmem cannot see the program {kind} compiles")
    if processes > 1:
        raise TargetError(
            f"{kind} over {processes} processes: fieldmem compiles one process's program and cannot run the "
            "others' part of it; check it in a single process (--devices N)"
        )
    _check_axis_size(cached, flat, kind)
    dynamic = tuple(i for i in range(len(args)) if i not in static)
    leaves = jax.tree_util.tree_flatten_with_path(([args[i] for i in dynamic], kwargs))[0]
    paths = tuple(path for path, _ in leaves) if len(leaves) == len(flat) else ()
    return _PmapProgram(jitted, tuple(flat), paths, dynamic)


def _check_axis_size(cached: Any, flat: Any, kind: str) -> None:
    """Refuse a mapped axis longer than the devices the pmap runs on: jax takes the first devices of the
    process, and with too few its per-device program fails to squeeze the axis out.

    Raises:
        ArgumentsError: the mapped axis has more entries than there are devices.
    """
    devices = int(getattr(getattr(cached, "mesh", None), "size", 0) or 0)
    for leaf, spec in zip(flat, getattr(cached, "in_specs_flat", ()) or ()):
        shape = getattr(leaf, "shape", None)
        for axis, entry in enumerate(tuple(spec) if spec is not None else ()):
            if entry is None or shape is None or axis >= len(shape) or not devices:
                continue
            if shape[axis] != devices:
                raise ArgumentsError(
                    f"{kind} maps an axis of {shape[axis]} over {devices} device(s) ({kind} needs one device per "
                    f"entry): check it with --devices {shape[axis]}, or on {shape[axis]} devices"
                )


def _jax_pmap(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall:
    """``jax.pmap``: its jit on the flattened arguments, each leaf named by its place in the user's arguments
    (``params['w']``); the outputs are the user's function's, under ``out``."""
    program = _pmap_program(fn, args, kwargs, "jax.pmap")
    arg_names = _parameter_names(getattr(fn, "__wrapped__", fn), len(args), kwargs)
    names: InputNames = {}
    if program.paths:
        for k, path in enumerate(program.paths):
            # path: (0 for positional or 1 for keyword, the position among the dynamic ones or the keyword, ...)
            where, key, rest = path[0].idx, path[1], path[2:]
            argument = arg_names[program.dynamic[key.idx]] if where == 0 else str(key.key)
            names[(k, "")] = (argument, argument + path_string(rest))
    else:  # flattened otherwise than fieldmem expects: by identity of the arrays
        user = _pytree_leaves([*zip(arg_names, args), *kwargs.items()])
        names = _names_by_identity(user, list(enumerate(program.flat)))
    return _pmap_call("jax.pmap", program, names)


def _pmap_call(
    kind: str,
    program: _PmapProgram,
    names: InputNames,
    outputs: Callable[[Any], list[str] | None] | None = None,
    returned: Callable[[Any], Any] | None = None,
    context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> WrappedCall:
    positional = tuple(names[(k, "")][1] if (k, "") in names else f"{kind} leaf {k}" for k in range(len(program.flat)))
    return WrappedCall(
        kind,
        program.jit,
        program.flat,
        {},
        names=LeafNames(names, outputs, returned),
        positional_names=positional,
        context=context,
        argument_items=False,
    )


def _eqx_pmap(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall:
    """``equinox.filter_pmap``: arrays split from everything else as ``_PmapWrapper._call`` splits them, then
    the ``jax.pmap`` it caches for them (its donation: every array with ``donate="all"``/``"warn"``)."""
    try:
        import equinox as eqx
        from equinox import _vmap_pmap as eqx_pmap

        maybe_dummy = eqx_pmap._common_preprocess(fn._axis_size, kwargs)
        in_axes = eqx_pmap._resolve_axes(args, eqx_pmap._named_in_axes(fn._fun, fn._in_axes, args))
        dynamic, static = eqx.partition((fn._fun, args, maybe_dummy, fn._out_axes), eqx.is_array)
        struct = _structs(dynamic)
        pmapped = eqx_pmap._filter_pmap_cache(
            fn._fun, static, struct, (None, in_axes, 0, None), fn._axis_name, fn._axis_size, fn._pmapkwargs
        )
    except AttributeError as exc:
        raise TargetError(
            f"this equinox version's filter_pmap has no {exc.name or 'attribute fieldmem reads'}: "
            "fieldmem cannot see the program it compiles"
        ) from exc
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ArgumentsError(f"equinox.filter_pmap refuses the example arguments: {first_line(exc)}") from exc
    if not _is_jax_pmap(pmapped):
        raise TargetError("this equinox version's filter_pmap compiles through no jax.pmap fieldmem knows")
    program = _pmap_program(pmapped, (dynamic,), {}, "equinox.filter_pmap")
    user_fn = getattr(fn, "__wrapped__", None) or fn._fun
    user_leaves = _pytree_leaves([*zip(_parameter_names(user_fn, len(args), {}), args)])
    label = getattr(user_fn, "__qualname__", None) or "the function"
    user_leaves.extend(_pytree_leaves([(label, fn._fun)]))
    names = _names_by_identity(user_leaves, list(enumerate(program.flat)))

    def outputs(out_info: Any) -> list[str] | None:
        import jax

        try:
            mapped, unmapped, _static = out_info
        except (TypeError, ValueError):
            return None
        # (the output's leaves mapped over each axis, as out's tree with None elsewhere; its unmapped arrays)
        result = ["out" + path_string(p[1:]) for p, _ in jax.tree_util.tree_flatten_with_path(mapped)[0]]
        return result + ["out" + path_string(p) for p, _ in jax.tree_util.tree_flatten_with_path(unmapped)[0]]

    def returned(structs: Any) -> Any:
        return eqx_pmap._postprocess(structs)  # the arrays combined with the static part, as filter_pmap returns

    return _pmap_call("equinox.filter_pmap", program, names, outputs, returned)


def _structs(tree: Any) -> Any:
    """``tree`` with each array a ``jax.ShapeDtypeStruct`` of its shape and dtype (as filter_pmap caches by)."""
    import jax

    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _nnx_pmap_parts(fn: Any) -> tuple[Any, Any, Any] | None:
    """``flax.nnx.pmap`` in graph mode (flax's default): ``functools.wraps(f)`` of ``update_context('pmap')``
    around its ``vmap_wrapper``, which closes over the ``jax.pmap`` and ``in_axes``. Returns (the update
    context's tag, the jax.pmap, in_axes); None for anything else."""
    if not isinstance(fn, types.FunctionType) or library_of(fn.__code__.co_filename) != "flax":
        return None
    outer = closure_values(fn)
    inner, tag = outer.get("f"), getattr(outer.get("self"), "tag", None)
    if not isinstance(inner, types.FunctionType) or tag is None:
        return None
    cells = closure_values(inner)
    pmapped = cells.get("pmapped_fn")
    if inner.__code__.co_name != "vmap_wrapper" or not _is_jax_pmap(pmapped) or "in_axes" not in cells:
        return None
    return tag, pmapped, cells["in_axes"]


def _nnx_pmap(fn: Any, parts: tuple[Any, Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> WrappedCall:
    """``flax.nnx.pmap``: the graph nodes split into ``NodeStates`` as its wrapper splits them (inside its
    update context), then its ``jax.pmap`` on them; outputs as ``nnx.jit``'s (updated graph-node state
    named as its input, then ``out``)."""
    tag, pmapped, in_axes = parts
    if kwargs:
        raise ArgumentsError("flax.nnx.pmap takes positional arguments only")
    try:
        from flax.nnx import extract, graphlib
        from flax.nnx.transforms import iteration

        with graphlib.update_context(tag):
            pure_args = extract.to_tree(args, prefix=in_axes, split_fn=iteration._vmap_split_fn, ctxtag=tag)
    except (AttributeError, ImportError) as exc:
        raise TargetError(
            f"this flax version's nnx.pmap is built otherwise ({first_line(exc)}): "
            "fieldmem cannot see the program it compiles"
        ) from exc
    program = _pmap_program(pmapped, tuple(pure_args), {}, "flax.nnx.pmap")
    arg_names = _parameter_names(getattr(fn, "__wrapped__", fn), len(args), {})
    user_leaves: list[tuple[str, str, Any]] = []
    for argument, value in zip(arg_names, args):
        user_leaves.extend(_nnx_leaves(graphlib, argument, value))
    names = _names_by_identity(user_leaves, list(enumerate(program.flat)))
    by_argument = _names_by_identity(user_leaves, list(enumerate(pure_args)))

    def context() -> contextlib.AbstractContextManager[Any]:
        return graphlib.update_context(tag)

    def outputs(out_info: Any) -> list[str] | None:
        try:
            args_out, out = out_info
        except (TypeError, ValueError):
            return None
        return _nnx_output_names((args_out, {}, out), tuple(pure_args), {}, by_argument, arg_names)

    def returned(structs: Any) -> Any:
        return structs[1]  # (args_out, out): the graph nodes are updated, out is returned

    return _pmap_call("flax.nnx.pmap", program, names, outputs, returned, context)
