"""Preparing a call: which arguments are static, which are donated, and the options of a user's jit.

:func:`prepare_call` turns a target's function and example arguments into a
:class:`PreparedCall`, the input of every lowering. It reads a user's jit
object through ``PjitFunction._jit_info`` (its static and donated arguments
and its other options), in :func:`user_jit_info` only, tolerated when missing.
Nothing is lowered or compiled here.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from fieldmem.driver.wrappers import LeafNames, WrappedCall, unwrap_call
from fieldmem.errors import ArgumentsError, DonationError
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = ["PreparedCall", "prepare_call", "signature_of", "user_jit_info"]


@dataclass(frozen=True)
class PreparedCall:
    """A function with its example arguments, ready to lower twice."""

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
    # a library wrapper (flax.nnx.jit, equinox.filter_jit, a jitted method, functools.partial): its kind,
    # the names of its leaves in the user's terms (None: the arguments are the user's) and what every
    # lowering must run inside (nnx's update context)
    wrapper: str | None = None
    leaf_names: LeafNames | None = None
    lowering_context: Callable[[], AbstractContextManager[Any]] | None = None


def _is_array_like(value: Any) -> bool:
    """Arrays, array specs and Python floats/complex (traced as scalars, not static)."""
    import jax
    import numpy as np

    if isinstance(value, bool):
        return False
    return isinstance(value, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct, float, complex))


def _leaves_of(value: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(value)


def _has_array_leaves(value: Any) -> bool:
    import jax

    return any(_is_array_like(leaf) for leaf in jax.tree_util.tree_leaves(value))


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``inspect.signature(fn)``, None where it has none (a builtin, some C callables)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _positional_names(signature: inspect.Signature | None, count: int) -> list[str]:
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
) -> PreparedCall:
    """Decide static and donated arguments for ``fn(*args, **kwargs)``.

    Arguments that hold no array (Python ints, strings, callables, ``None``)
    are made static automatically unless the target is a user's jit object,
    whose own static arguments are kept. ``donate`` "auto" means the jit
    object's own donation, or every array argument for a plain function.
    A library wrapper is prepared as the jit it compiles through
    (:func:`_prepare_wrapped`).
    """
    wrapped = unwrap_call(fn, args, kwargs)
    if wrapped is not None:
        return _prepare_wrapped(wrapped, donate=donate, static=static)
    info = user_jit_info(fn)
    underlying = getattr(fn, "_fun", fn) if info is not None else fn
    names = _positional_names(signature_of(underlying), len(args))
    static_positions, static_names = _static_arguments(info, static, names, args, kwargs)
    donation_source, donated_positions, donated_names = _donated_arguments(
        info, donate, names, args, kwargs, static_positions, static_names
    )
    return PreparedCall(
        function=underlying,
        user_jit=fn if info is not None else None,
        args=args,
        kwargs=kwargs,
        positional_names=tuple(names),
        static_positions=frozenset(static_positions),
        static_names=frozenset(static_names),
        donated_positions=frozenset(donated_positions),
        donated_names=frozenset(donated_names),
        donation_source=donation_source,
        jit_options=_jit_options_of(info) if info is not None else {},
    )


def _prepare_wrapped(wrapped: WrappedCall, *, donate: DonateSpec, static: StaticSpec) -> PreparedCall:
    """The call of the jit a library wrapper compiles through: its own static and donated arguments
    (``donate`` "auto": the wrapper's donation), its leaves named in the user's terms.

    Raises:
        DonationError: ``--donate``/``--static`` name arguments of a wrapper whose program does not
            take the user's arguments one by one (equinox.filter_jit).
    """
    if not wrapped.argument_items:
        for what, items in (("--donate", donate.items), ("--static", static.items)):
            if items:
                raise DonationError(
                    f"{what} {','.join(map(str, items))}: the target is {wrapped.kind}, whose program takes "
                    "its arrays split from the rest, not argument by argument; use --donate auto (its own "
                    "donate= mode), all or none, and no --static (it holds every non-array static)"
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


def _static_arguments(
    info: Any | None, static: StaticSpec, names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[set[int], set[str]]:
    """The static positions and keyword names: a jit object's own plus ``--static``; for a plain function,
    ``--static`` plus every argument that holds no array. Each must be hashable.

    Raises:
        DonationError: ``--static`` names an argument the call does not have.
        ArgumentsError: a static argument is not hashable.
    """
    if info is not None:
        static_positions = set(getattr(info, "static_argnums", ()) or ())
        static_names = set(getattr(info, "static_argnames", ()) or ()) & set(kwargs)
        explicit_pos, explicit_names = _resolve_positions(static.items, "--static", names, kwargs)
        static_positions |= explicit_pos
        static_names |= explicit_names
    else:
        static_positions, static_names = _resolve_positions(static.items, "--static", names, kwargs)
        for i, value in enumerate(args):
            if not _has_array_leaves(value):
                static_positions.add(i)
        for key, value in kwargs.items():
            if not _has_array_leaves(value):
                static_names.add(key)
    explicit = set(static.items)
    for i in static_positions:
        if i < len(args):
            _check_hashable(args[i], names[i], explicit=i in explicit or names[i] in explicit)
    for key in static_names:
        _check_hashable(kwargs[key], key, explicit=key in explicit)
    return static_positions, static_names


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

    Raises:
        DonationError: ``--donate`` names an argument the call does not have, or a static one.
    """
    donation_source = "spec"
    if donate.mode == "auto" and info is not None:
        donation_source = "jit"
        donated_positions = set(getattr(info, "donate_argnums", ()) or ())
        donated_names = set(getattr(info, "donate_argnames", ()) or ()) & set(kwargs)
    elif donate.mode in ("all", "auto"):
        donated_positions = {i for i in range(len(args)) if i not in static_positions}
        donated_names = {k for k in kwargs if k not in static_names}
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
    except TypeError:
        if explicit:
            what = "an array" if _has_array_leaves(value) else f"a {type(value).__name__}"
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
    import jax

    options: dict[str, Any] = {}
    for key in ("keep_unused", "inline", "device", "backend"):
        value = getattr(info, key, None)
        if value not in (None, False):
            options[key] = value
    if getattr(info, "user_specified_in_shardings", False):
        try:
            options["in_shardings"] = jax.tree_util.tree_unflatten(info.in_shardings_treedef, info.in_shardings_leaves)
        except Exception:
            pass
    try:
        leaves = info.out_shardings_leaves
        if any(type(leaf).__name__ != "UnspecifiedValue" for leaf in leaves):
            options["out_shardings"] = jax.tree_util.tree_unflatten(info.out_shardings_treedef, leaves)
    except Exception:
        pass
    kvs = getattr(info, "compiler_options_kvs", ()) or ()
    if kvs:
        options["compiler_options"] = dict(kvs)
    return options
