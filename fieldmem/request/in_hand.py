"""A function (or a chain) in hand, with its arguments, as a target: the Python API, the pytest plugin's
checks (in the caller's process, or in a worker from what :mod:`fieldmem.driver.sendable` sent).

Its settings are parsed as the command line parses them; its name is
``module:qualname`` (a chain's ``module:a,b,c``), and a baseline keys it as
``fieldmem check`` names the same function written as a file or a module.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fieldmem.model.errors import OptionError
from fieldmem.model.units import parse_bytes
from fieldmem.request.definitions import definition_of, is_installed, jit_definition_of, module_file
from fieldmem.request.options import parse_new
from fieldmem.request.registry import step_factories
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import ChainTarget, Step, Target, given_name, module_of

__all__ = ["callable_name", "in_hand", "in_hand_key", "in_hand_name"]


def in_hand_key(kind: str, subject: Any, name: str | None) -> str:
    """The name a baseline keys a function (or chain) in hand by, as a target spec the gate reads
    (:func:`fieldmem.gate.baseline.project_name`): ``name`` when given (a case's own name), else the file
    of the function's module relative to the working folder with the qualified name
    (``models/train.py:step``, ``../updates.py:update``), as ``fieldmem check`` names the same function
    written as a file or a module; a module of an installed package (or one with no file) keeps
    :func:`in_hand_name`'s ``module:qualname``.
    """
    display = in_hand_name(kind, subject, name)
    if name:
        return display
    module_part, sep, rest = display.partition(":")
    file = module_file(module_part) if sep else None
    if file is None or is_installed(file):
        return display
    try:
        shown = os.path.relpath(os.path.realpath(file))
    except ValueError:  # another drive (Windows)
        shown = os.path.realpath(file)
    return f"{shown.replace(os.sep, '/')}:{rest}"


def callable_name(fn: Callable[..., Any]) -> str:
    """``module:name`` of ``fn``: the module its function is defined in, and the name the user gave ``fn``
    there (:func:`given_name`: a jit alias by its own name, not the function it wraps)."""
    inner = getattr(fn, "_fun", fn)
    if getattr(inner, "__qualname__", None) is None and getattr(inner, "__name__", None) is None:
        return type(fn).__name__
    module = getattr(inner, "__module__", None)
    name = given_name(fn)
    return f"{module}:{name}" if module else name


def _function_target(
    fn: Callable[..., Any],
    display: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    settings: dict[str, Any],
) -> Target:
    call_args, call_kwargs = tuple(args), dict(kwargs)
    # the footprint budget, by the name the caller gave it (max_peak= is its older name)
    budget = "max_footprint" if settings.get("max_footprint") is not None else "max_peak"
    max_peak, max_live_peak = settings.get(budget), settings.get("max_live_peak")
    return Target(
        spec=display,
        name=display,
        function=fn,
        # the (args, kwargs) form, so that a single tuple argument is never unpacked
        args_factory=lambda: (call_args, call_kwargs),
        args_origin=f"the arguments given to {display}",
        shapes=None,
        donate=DonateSpec.parse(settings.get("donate"), "donate="),
        static=StaticSpec.parse(settings.get("static"), "static="),
        expect=settings.get("expect") or "any",
        max_peak=None if max_peak is None else parse_bytes(max_peak, f"{budget}="),
        max_live_peak=None if max_live_peak is None else parse_bytes(max_live_peak, "max_live_peak="),
        definition=definition_of(fn),
        new=parse_new(settings.get("new"), "new=") or (),
        jit_definition=jit_definition_of(fn, module_of(fn), given_name(fn)),
    )


def in_hand_name(kind: str, subject: Any, name: str | None) -> str:
    """The name :func:`in_hand` gives a function (``module:qualname``) or a chain (``module:a,b,c``)."""
    if name:
        return name
    if kind == "function":
        return callable_name(subject)
    steps = list(subject)
    if not steps:
        return "chain"
    names = [callable_name(s).rpartition(":")[2] for s in steps]
    return f"{callable_name(steps[0]).rpartition(':')[0]}:{','.join(names)}"


def _extras_in_hand(extras: Any) -> Callable[[], Any] | None:
    """A ``step_args`` value as a factory: a callable as it is, extras in hand returned as given."""
    if extras is None or callable(extras):
        return extras
    return lambda: extras


def in_hand(
    kind: str, subject: Any, args: tuple[Any, ...], kwargs: dict[str, Any], **settings: Any
) -> Target | ChainTarget:
    """The target of a function (``kind`` ``"function"``) or a chain of steps (``"chain"``) in hand, called
    with ``args`` and ``kwargs``; ``settings`` as :func:`fieldmem.check_function` and
    :func:`fieldmem.check_chain` take them (``donate``, ``static``, ``name``, ``expect``, ``max_peak``,
    ``max_live_peak``, ``new``, ``step_args``), parsed as the command line parses them.

    Raises:
        OptionError: not a function, fewer than two steps, or a setting fieldmem cannot use.
    """
    if kind == "function":
        if not callable(subject):
            raise OptionError(
                f"{type(subject).__name__} is not callable: pass the update function first, then its arguments"
            )
        return _function_target(subject, in_hand_name(kind, subject, settings.get("name")), args, kwargs, settings)
    steps = list(subject)
    if len(steps) < 2 or not all(callable(s) for s in steps):
        raise OptionError("check_chain needs a sequence of at least two functions, then the first one's arguments")
    names = [callable_name(s).rpartition(":")[2] for s in steps]
    display = in_hand_name(kind, steps, settings.get("name"))
    first = _function_target(steps[0], display, args, kwargs, {**settings, "new": None})
    extras = step_factories(tuple(steps), settings.get("step_args"), "check_chain") or (None,) * len(steps)
    return ChainTarget(
        first=first,
        steps=tuple(
            Step(name=n, function=s, definition=definition_of(s), extras=_extras_in_hand(e))
            for n, s, e in zip(names, steps, extras)
        ),
    )
