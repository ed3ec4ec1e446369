"""Preparing a call: which arguments are static, which are donated, and the options of a user's jit.

:func:`prepare_call` turns a target's function and example arguments into a
:class:`PreparedCall`, the input of every lowering. It reads a user's jit
object through ``PjitFunction._jit_info`` (its static and donated arguments
and its other options), in :func:`user_jit_info` only, tolerated when missing.
A plain function is prepared as ``jax.jit`` sees it: arrays and Python
scalars traced, leaves that are no JAX type held static as
``equinox.filter_jit`` holds them. Nothing is lowered or compiled here;
:func:`concretize` searches, by tracing through a function it is given, for
the Python scalars tracing needs concrete.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from fieldmem.driver.jaxerrors import first_line
from fieldmem.driver.paths import path_string
from fieldmem.driver.shapes import check_argument_sizes
from fieldmem.driver.wrappers import LeafNames, WrappedCall, unwrap_call
from fieldmem.model.errors import ArgumentsError, DonationError, FieldmemError
from fieldmem.model.readings import CallShape, MadeStatic
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = [
    "PreparedCall",
    "Unit",
    "call_shape",
    "concretize",
    "has_array_leaves",
    "positional_display_names",
    "prepare_call",
    "signature_of",
    "user_jit_info",
]


# A traced Python scalar that fieldmem makes static when tracing needs it concrete: the argument
# (position or keyword) and the leaf's flat index in it (None: the whole argument, static_argnums).
Unit = tuple[int | str, int | None]


@dataclass(frozen=True)
class _Source:
    """What :func:`prepare_call` was given: to prepare the call again with scalars made static."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    donate: DonateSpec
    static: StaticSpec


@dataclass(frozen=True)
class PreparedCall:
    """A function with its example arguments, ready to lower twice.

    ``args`` and ``kwargs`` are what jax is given: where an argument holds
    leaves held static (a function, a string, a scalar that must be concrete),
    they are ``None`` in it and ``function`` (for a plain function, a wrapper
    of it) puts them back, as ``equinox.filter_jit`` does; paths are unchanged.
    """

    function: Callable[..., Any]
    user_jit: Any | None  # the user's own jax.jit object, when the target is one
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    positional_names: tuple[str, ...]  # display name of each positional argument
    static_positions: frozenset[int]
    static_names: frozenset[str]
    donated_positions: frozenset[int]
    donated_names: frozenset[str]
    donation_source: str  # "spec" or "jit"
    jit_options: dict[str, Any]
    made_static: tuple[MadeStatic, ...] = ()  # held static where jax.jit would trace (or refuse) them
    scalar_units: tuple[Unit, ...] = ()  # traced Python scalars :func:`concretize` may make static
    source: _Source | None = field(default=None, repr=False, compare=False)
    # a library wrapper (flax.nnx.jit, equinox.filter_jit, a jitted method, functools.partial): its kind,
    # the names of its leaves in the user's terms (None: the arguments are the user's) and what every
    # lowering must run inside (nnx's update context)
    wrapper: str | None = None
    leaf_names: LeafNames | None = None
    lowering_context: Callable[[], AbstractContextManager[Any]] | None = None


def call_shape(call: PreparedCall) -> CallShape:
    """What the advisor reasons about of ``call``, as plain data (it never sees the function or its arguments)."""
    try:
        parameters = tuple(inspect.signature(call.function).parameters)
    except (TypeError, ValueError):
        parameters = ()
    return CallShape(
        function_name=getattr(call.function, "__name__", "fn"),
        parameters=parameters,
        positional_names=call.positional_names,
        keyword_names=tuple(call.kwargs),
        static_positions=call.static_positions,
        static_names=call.static_names,
        donation_source=call.donation_source,
        wrapper=call.wrapper,
        user_jit=call.user_jit is not None,
    )


def _is_python_scalar(value: Any) -> bool:
    """A Python bool, int, float or complex: jax.jit traces it as a weakly typed scalar."""
    return type(value) in (bool, int, float, complex)


def _is_array(value: Any) -> bool:
    """An array or an array spec: a leaf with a buffer of the user's (or one fieldmem makes)."""
    import jax
    import numpy as np

    return isinstance(value, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)) or hasattr(
        type(value), "__jax_array__"
    )


def _is_traced(value: Any) -> bool:
    """A leaf jax.jit traces: an array or a Python scalar (anything else jax.jit refuses)."""
    return _is_array(value) or _is_python_scalar(value)


def _leaves_of(value: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(value)


def has_array_leaves(value: Any) -> bool:
    import jax

    return any(_is_array(leaf) for leaf in jax.tree_util.tree_leaves(value))


def _stands_in(value: Any) -> bool:
    """Whether ``value`` holds a ``ShapeDtypeStruct`` that stands for an array
    (:func:`~fieldmem.driver.placement.stand_in`): where the array would be refused, so is it."""
    import jax

    from fieldmem.driver.placement import stood_for

    return any(
        isinstance(leaf, jax.ShapeDtypeStruct) and stood_for(leaf) is not None
        for leaf in jax.tree_util.tree_leaves(value)
    )


def _is_hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``inspect.signature(fn)``, None where it has none (a builtin, some C callables)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def positional_display_names(signature: inspect.Signature | None, count: int) -> list[str]:
    """Display names of positional arguments 0..count-1 (``args[k]`` for ``*args``)."""
    names: list[str] = []
    params = list(signature.parameters.values()) if signature else []
    var_positional = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i in range(count):
        if i < len(positional):
            names.append(positional[i])
        elif var_positional:
            names.append(f"{var_positional}[{i - len(positional)}]")
        else:
            names.append(f"arg{i}")
    return names


def user_jit_info(fn: Any) -> Any | None:
    """The ``PjitInfo`` of a ``jax.jit`` object, or None for a plain function.

    A bound method of a jit object (``solver.advance``) forwards ``_jit_info`` but is not one: its
    instance is an argument (:mod:`fieldmem.driver.wrappers`).
    """
    if inspect.ismethod(fn):
        return None
    info = getattr(fn, "_jit_info", None)
    if info is None or not hasattr(fn, "lower"):
        return None
    return info


def _resolve_positions(
    spec_items: Sequence[int | str],
    what: str,
    names: list[str],
    kwargs: dict[str, Any],
) -> tuple[set[int], set[str]]:
    positions: set[int] = set()
    keyword: set[str] = set()
    for item in spec_items:
        if isinstance(item, int):
            if not 0 <= item < len(names):
                raise DonationError(
                    f"{what} names argument {item}, but the call has {len(names)} positional "
                    f"argument(s) (0..{len(names) - 1})"
                )
            positions.add(item)
        elif item in names:
            positions.add(names.index(item))
        elif item in kwargs:
            keyword.add(item)
        else:
            known = names + list(kwargs)
            raise DonationError(
                f"{what} names argument {item!r}, which the call does not pass; "
                f"arguments are: {', '.join(known) or '(none)'}"
            )
    return positions, keyword


def prepare_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    donate: DonateSpec,
    static: StaticSpec,
    concrete: Mapping[Unit, str] | None = None,
) -> PreparedCall:
    """Decide static and donated arguments for ``fn(*args, **kwargs)``.

    A user's jit object keeps its own static arguments (``--static`` adds
    to them). For a plain function the program is the one ``jax.jit(fn)``
    builds for these arguments: arrays and Python scalars are traced (see
    :func:`_plain_statics` for what is static). ``concrete``: the traced
    Python scalars to make static, with why (:func:`concretize` finds them).
    ``donate`` "auto" means the jit object's own donation, or every argument
    holding an array for a plain function. A library wrapper is prepared as
    the jit it compiles through (:func:`_prepare_wrapped`).
    """
    # an array XLA cannot hold aborts the process in the compile: refuse it first
    check_argument_sizes(args, kwargs, positional_display_names(signature_of(getattr(fn, "_fun", fn)), len(args)))
    wrapped = unwrap_call(fn, args, kwargs)
    if wrapped is not None:
        return _prepare_wrapped(wrapped, donate=donate, static=static)
    info = user_jit_info(fn)
    underlying = getattr(fn, "_fun", fn) if info is not None else fn
    names = positional_display_names(signature_of(underlying), len(args))
    if info is not None:
        static_positions, static_names = _jit_statics(info, static, names, kwargs)
        held: dict[int | str, tuple[Any, dict[int, Any]]] = {}
        made: list[MadeStatic] = []
        units: list[Unit] = []
    else:
        static_positions, static_names, held, made, units = _plain_statics(static, names, args, kwargs, concrete or {})
    _check_statics(static, names, args, kwargs, static_positions, static_names)
    donation_source, donated_positions, donated_names = _donated_arguments(
        info, donate, names, args, kwargs, static_positions, static_names
    )
    function, call_args, call_kwargs = underlying, args, kwargs
    if info is None:
        function, call_args, call_kwargs = _plain_program(underlying, args, kwargs, held)
    return PreparedCall(
        function=function,
        user_jit=fn if info is not None else None,
        args=call_args,
        kwargs=call_kwargs,
        positional_names=tuple(names),
        static_positions=frozenset(static_positions),
        static_names=frozenset(static_names),
        donated_positions=frozenset(donated_positions),
        donated_names=frozenset(donated_names),
        donation_source=donation_source,
        jit_options=_jit_options_of(info) if info is not None else {},
        made_static=tuple(made),
        scalar_units=tuple(units),
        source=_Source(fn, args, kwargs, donate, static),
    )


def _prepare_wrapped(wrapped: WrappedCall, *, donate: DonateSpec, static: StaticSpec) -> PreparedCall:
    """The call of the jit a library wrapper compiles through: its own static and donated arguments
    (``donate`` "auto": the wrapper's donation), its leaves named in the user's terms.

    Raises:
        DonationError: ``--donate``/``--static`` name arguments of a wrapper whose program does not
            take the user's arguments one by one (equinox.filter_jit, the pmap family).
    """
    if not wrapped.argument_items:
        for what, items in (("--donate", donate.items), ("--static", static.items)):
            if items:
                raise DonationError(
                    f"{what} {','.join(map(str, items))}: the target is {wrapped.kind}, whose program takes "
                    "its arrays split from the rest, not argument by argument; use --donate auto (the "
                    "wrapper's own donation), all or none, and no --static (the wrapper decides what is static)"
                )
    call = prepare_call(wrapped.jit, wrapped.args, wrapped.kwargs, donate=donate, static=static)
    # an argument of the inner program with no array in it donates nothing (filter_jit's donated part
    # under donate="none" is empty): not a donation jax dropped
    empty = {i for i in call.donated_positions if not _leaves_of(call.args[i])}
    empty_names = {k for k in call.donated_names if not _leaves_of(call.kwargs[k])}
    if empty or empty_names:
        call = dataclasses.replace(
            call, donated_positions=call.donated_positions - empty, donated_names=call.donated_names - empty_names
        )
    if wrapped.positional_names is not None and len(wrapped.positional_names) >= len(call.positional_names):
        call = dataclasses.replace(call, positional_names=wrapped.positional_names[: len(call.positional_names)])
    return dataclasses.replace(call, wrapper=wrapped.kind, leaf_names=wrapped.names, lowering_context=wrapped.context)


def _jit_statics(info: Any, static: StaticSpec, names: list[str], kwargs: dict[str, Any]) -> tuple[set[int], set[str]]:
    """A jit object's own static positions and keyword names, plus ``--static``'s.

    Raises:
        DonationError: ``--static`` names an argument the call does not have.
    """
    static_positions = set(getattr(info, "static_argnums", ()) or ())
    static_names = set(getattr(info, "static_argnames", ()) or ()) & set(kwargs)
    explicit_pos, explicit_names = _resolve_positions(static.items, "--static", names, kwargs)
    return static_positions | explicit_pos, static_names | explicit_names


NOT_TRACEABLE = "{kind} is no JAX type: closed over, as equinox.filter_jit holds it"


def _plain_statics(
    static: StaticSpec,
    names: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    concrete: Mapping[Unit, str],
) -> tuple[set[int], set[str], dict[int | str, tuple[Any, dict[int, Any]]], list[MadeStatic], list[Unit]]:
    """What is static in ``jax.jit(fn)`` of a plain function on these arguments, and what fieldmem adds.

    Static: ``--static`` (and ``fieldmem.case(static=...)``); a hashable
    argument with no leaf jax.jit traces (a string, a callable, ``None``); the
    Python scalars in ``concrete``. Traced: arrays and Python scalars, at the
    top or inside a pytree, as jax.jit traces them. A leaf jax.jit cannot trace
    (a function, a string) inside a pytree (one that holds traced leaves, or an
    unhashable one) is held static, closed over, as ``equinox.filter_jit``
    holds it.

    Returns the static positions and keyword names, the leaves held static per
    argument (its treedef, and the held leaves by flat index), what was made
    static where jax.jit would trace or refuse it, and the traced Python
    scalars that could be made static.

    Raises:
        DonationError: ``--static`` names an argument the call does not have.
    """
    import jax

    static_positions, static_names = _resolve_positions(static.items, "--static", names, kwargs)
    held: dict[int | str, tuple[Any, dict[int, Any]]] = {}
    made: list[MadeStatic] = []
    units: list[Unit] = []
    slots: list[tuple[int | str, str, Any]] = [(i, names[i], v) for i, v in enumerate(args)]
    slots += [(key, key, value) for key, value in kwargs.items()]
    for slot, display, value in slots:
        if slot in (static_positions if isinstance(slot, int) else static_names):
            continue
        leaves, treedef = jax.tree_util.tree_flatten(value)  # the leaves' paths: only where one is named
        paths: list[Any] = []
        traced = [k for k, leaf in enumerate(leaves) if _is_traced(leaf)]
        opaque = jax.tree_util.treedef_is_leaf(treedef)  # the argument is itself a leaf: no pytree to split
        if not traced and (_is_hashable(value) or opaque):
            # nothing jax.jit traces: static as a whole (an unhashable object is refused later)
            _add(slot, static_positions, static_names)
            continue
        scalars = [k for k in traced if _is_python_scalar(leaves[k])]
        # an argument of Python scalars only is made static whole (static_argnums) where it must be
        whole = len(scalars) == len(traced) and _is_hashable(value)
        if whole:
            units.append((slot, None))
            if (slot, None) in concrete:
                _add(slot, static_positions, static_names)
                made.append(MadeStatic(display, "concrete", concrete[(slot, None)]))
                continue
        kept: dict[int, Any] = {}
        scalar_set = set(scalars)
        for k, leaf in enumerate(leaves):
            if k in scalar_set:
                traced_leaf = True
            elif _is_array(leaf):
                continue  # an array: traced, nothing to say (most leaves; named only when something is said)
            else:
                traced_leaf = False
            if not paths:
                paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(value)[0]]
            where = display + path_string(paths[k])
            if not traced_leaf:
                kept[k] = leaf
                kind = (
                    "a string"
                    if isinstance(leaf, str)
                    else "a function"
                    if callable(leaf)
                    else f"a {type(leaf).__name__}"
                )
                made.append(MadeStatic(where, "not-traceable", NOT_TRACEABLE.format(kind=kind)))
            elif not whole:  # a Python scalar, in a pytree with arrays
                units.append((slot, k))
                if (slot, k) in concrete:
                    kept[k] = leaf
                    made.append(MadeStatic(where, "concrete", concrete[(slot, k)]))
        if kept:
            held[slot] = (treedef, kept)
    return static_positions, static_names, held, made, units


def _add(slot: int | str, positions: set[int], names: set[str]) -> None:
    if isinstance(slot, int):
        positions.add(slot)
    else:
        names.add(slot)


def _plain_program(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    held: dict[int | str, tuple[Any, dict[int, Any]]],
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The function jax traces for a plain function, and the arguments it is given, as
    ``equinox.filter_jit`` splits them.

    The held leaves are ``None`` in the arguments and closed over: the function
    puts each back in its place (by flat index in the argument's treedef)
    before calling ``function``. Where leaves are held, an output leaf that is
    no JAX type (a model's activation function, a string) is ``None`` in the
    program's outputs: it is no output of the compiled program, as under
    ``filter_jit``. Where none is, the call is the one ``jax.jit(fn)`` makes,
    and such an output is jax's own error (it refuses to return a string).
    """
    import jax

    tree = jax.tree_util

    def without(value: Any, treedef: Any, kept: dict[int, Any]) -> Any:
        leaves = tree.tree_leaves(value)
        return tree.tree_unflatten(treedef, [None if k in kept else leaf for k, leaf in enumerate(leaves)])

    def restore(value: Any, treedef: Any, kept: dict[int, Any]) -> Any:
        traced = iter(tree.tree_leaves(value))
        return tree.tree_unflatten(treedef, [kept[k] if k in kept else next(traced) for k in range(treedef.num_leaves)])

    call_args = list(args)
    call_kwargs = dict(kwargs)
    for slot, (treedef, kept) in held.items():
        if isinstance(slot, int):
            call_args[slot] = without(args[slot], treedef, kept)
        else:
            call_kwargs[slot] = without(kwargs[slot], treedef, kept)

    @functools.wraps(function)
    def traced_program(*args: Any, **kwargs: Any) -> Any:
        args_list = list(args)
        for slot, (treedef, kept) in held.items():
            if isinstance(slot, int):
                args_list[slot] = restore(args_list[slot], treedef, kept)
            else:
                kwargs[slot] = restore(kwargs[slot], treedef, kept)
        out = function(*args_list, **kwargs)
        if not held:  # as jax.jit(fn) traces it: what it refuses to return, it refuses here
            return out
        return tree.tree_map(lambda leaf: leaf if _is_traced(leaf) else None, out)

    return traced_program, tuple(call_args), call_kwargs


def concretize(
    call: PreparedCall, error: BaseException, trace: Callable[[PreparedCall], BaseException | None]
) -> PreparedCall | None:
    """``call`` with the fewest of its traced Python scalars made static such that it traces, or None.

    ``error``: what tracing ``call`` raised. ``trace`` traces a call and
    returns what it raised (None: it traced). When tracing with every traced
    Python scalar static still fails, the scalars are not the cause: None.
    Otherwise each argument, then each scalar, is traced again where tracing
    allows, and each one left static says why: jax's error when it is traced.
    """
    source = call.source
    if source is None or not call.scalar_units:
        return None

    def remake(chosen: Mapping[Unit, str]) -> PreparedCall | None:
        try:
            return prepare_call(
                source.fn, source.args, source.kwargs, donate=source.donate, static=source.static, concrete=chosen
            )
        except FieldmemError:
            return None

    def traces(chosen: Mapping[Unit, str]) -> BaseException | None:
        if not chosen:
            return error  # the call as it was
        candidate = remake(chosen)
        return trace(candidate) if candidate is not None else error

    why = first_line(error)
    needed: dict[Unit, str] = dict.fromkeys(call.scalar_units, why)
    if traces(needed) is not None:
        return None
    if len(needed) > 1:  # by argument first, then by scalar
        for slot in dict.fromkeys(slot for slot, _ in call.scalar_units):
            trial = {unit: reason for unit, reason in needed.items() if unit[0] != slot}
            if traces(trial) is None:
                needed = trial
    for unit in list(needed):
        trial = {other: reason for other, reason in needed.items() if other != unit}
        failure = traces(trial)
        if failure is None:
            needed = trial
        else:
            needed[unit] = first_line(failure)
    return remake(needed) if needed else None


def _check_statics(
    static: StaticSpec,
    names: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    static_positions: set[int],
    static_names: set[str],
) -> None:
    """Each static argument must be hashable.

    Raises:
        ArgumentsError: a static argument is not hashable.
    """
    explicit = set(static.items)
    for i in static_positions:
        if i < len(args):
            _check_hashable(args[i], names[i], explicit=i in explicit or names[i] in explicit)
    for key in static_names:
        _check_hashable(kwargs[key], key, explicit=key in explicit)


def _donated_arguments(
    info: Any | None,
    donate: DonateSpec,
    names: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    static_positions: set[int],
    static_names: set[str],
) -> tuple[str, set[int], set[str]]:
    """Where the donation comes from (``jit`` or ``spec``) and the donated positions and keyword names.

    "all" (and "auto" for a plain function) donates every argument holding an
    array: a Python scalar has no buffer of the user's to reuse.

    Raises:
        DonationError: ``--donate`` names an argument the call does not have, or a static one.
    """
    donation_source = "spec"
    if donate.mode == "auto" and info is not None:
        donation_source = "jit"
        donated_positions = set(getattr(info, "donate_argnums", ()) or ())
        donated_names = set(getattr(info, "donate_argnames", ()) or ()) & set(kwargs)
    elif donate.mode in ("all", "auto"):
        donated_positions = {i for i in range(len(args)) if i not in static_positions and has_array_leaves(args[i])}
        donated_names = {k for k in kwargs if k not in static_names and has_array_leaves(kwargs[k])}
    elif donate.mode == "none":
        donated_positions, donated_names = set(), set()
    else:
        donated_positions, donated_names = _resolve_positions(donate.items, "--donate", names, kwargs)
        clash = sorted(names[i] for i in donated_positions & static_positions) + sorted(donated_names & static_names)
        if clash:
            raise DonationError(
                f"--donate names {', '.join(clash)}, which is static (not an array): "
                "only array arguments can be donated"
            )
    # donation only matters for arguments with arrays in them (and passed
    # positionally: a jit's donate_argnums may name a parameter left at its default)
    donated_positions = {i for i in donated_positions if i not in static_positions and i < len(args)}
    donated_names = {k for k in donated_names if k not in static_names}
    return donation_source, donated_positions, donated_names


def _check_hashable(value: Any, name: str, *, explicit: bool = False) -> None:
    try:
        hash(value)
        if _stands_in(value):  # a ShapeDtypeStruct standing for an array (a traced factory's): as unhashable
            raise TypeError
    except TypeError:
        if explicit:
            what = "an array" if has_array_leaves(value) else f"a {type(value).__name__}"
            raise ArgumentsError(
                f"--static names {name!r}, but a static argument must be hashable and {name!r} is {what}: "
                "leave it out of --static (arrays are traced)"
            ) from None
        raise ArgumentsError(
            f"argument {name!r} holds no array, so it must be static, but a static argument must be "
            f"hashable and {type(value).__name__} is not: pass a tuple instead of a list, or arrays"
        ) from None


def _jit_options_of(info: Any) -> dict[str, Any]:
    """The options of a user's jit object other than donation, to rebuild it."""

    options: dict[str, Any] = {}
    for key in ("keep_unused", "inline", "device", "backend"):
        value = getattr(info, key, None)
        if value not in (None, False):
            options[key] = value
    for side in ("in", "out"):
        try:
            given = _shardings_given(info, side)
        except Exception:
            given = None
        if given is not None:
            options[f"{side}_shardings"] = given
    kvs = getattr(info, "compiler_options_kvs", ()) or ()
    if kvs:
        options["compiler_options"] = dict(kvs)
    return options


def _shardings_given(info: Any, side: str) -> Any | None:
    """A jit's ``in_shardings`` or ``out_shardings`` (``side`` "in" or "out") as the user gave them, None
    where the user gave none: jax keeps the layouts of a ``Format`` apart from the shardings, so each leaf
    with a layout is made a ``Format`` again (without it, a rebuilt jit compiles jax's default layouts)."""
    import jax
    from jax.experimental.layout import Format

    shardings = getattr(info, f"{side}_shardings_leaves")
    layouts = getattr(info, f"{side}_layouts_leaves", None) or (None,) * len(shardings)
    unspecified = [type(leaf).__name__ == "UnspecifiedValue" for leaf in shardings]
    given = info.user_specified_in_shardings if side == "in" else not all(unspecified)
    if not given and all(layout is None for layout in layouts):
        return None
    leaves = [
        sharding if layout is None else Format(layout, None if blank else sharding)
        for layout, sharding, blank in zip(layouts, shardings, unspecified, strict=True)
    ]
    return jax.tree_util.tree_unflatten(getattr(info, f"{side}_shardings_treedef"), leaves)
