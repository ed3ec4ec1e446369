"""The registration API: ``fieldmem.case(...)`` names a function and its example arguments.

A module registers its cases at import time; ``fieldmem check pkg.model``
then checks every case registered by ``pkg.model``. Registering imports no
jax and allocates nothing: the args factory runs only when fieldmem checks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fieldmem.model.errors import OptionError
from fieldmem.model.units import parse_bytes
from fieldmem.request.options import footprint_budget, parse_expect, parse_new
from fieldmem.request.spec import DonateSpec, StaticSpec

if TYPE_CHECKING:
    from fieldmem.model.word_sets import Expectation

__all__ = ["Case", "case", "chain", "registered_cases", "step_factories", "step_names"]

# module name -> (the module's globals at registration, its cases). A module
# imported again (reloaded, or re-imported after its sys.modules entry was
# dropped) has a fresh globals dict, and its earlier cases are replaced rather
# than registered twice.
_REGISTRY: dict[str, tuple[dict[str, Any], list[Case]]] = {}


@dataclass(frozen=True)
class Case:
    """A function to check, with where its example arguments come from."""

    function: Callable[..., Any]
    args: Callable[[], Any] | None
    name: str | None
    donate: DonateSpec
    static: StaticSpec
    expect: Expectation | None
    max_peak: int | None
    module: str
    max_live_peak: int | None = None
    steps: tuple[Callable[..., Any], ...] = ()  # a chain: every step, ``function`` being the first
    # a chain: per step, the factory of the extras it takes besides the state (None: none)
    step_args: tuple[Callable[[], Any] | None, ...] = ()
    new: tuple[str, ...] | None = None  # output paths declared new (never a break of in place)

    @property
    def is_chain(self) -> bool:
        return bool(self.steps)


def case(
    function: Callable[..., Any] | None = None,
    *,
    args: Callable[[], Any] | None = None,
    name: str | None = None,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    expect: str | None = None,
    max_footprint: str | int | None = None,
    max_live_peak: str | int | None = None,
    max_peak: str | int | None = None,
    new: str | list[str] | tuple[str, ...] | None = None,
) -> Any:
    """Register ``function`` to be checked by ``fieldmem check <this module>``.

    Arguments:
        function: the update function, a plain function or a ``jax.jit`` object.
        args: a callable returning the positional arguments tuple, or a pair
            ``(args, kwargs)``. It may return ``jax.ShapeDtypeStruct``s, in
            which case nothing is allocated.
        name: display name (default ``module:function``).
        donate: ``"all"``, ``"none"``, argument numbers or names; default: the
            jit object's own donation, or every array argument.
        static: extra static arguments (numbers or names).
        expect: ``"in-place"`` to fail the check when the donated variant is
            not in place; ``"any"`` (default) only reports.
        max_footprint: a budget such as ``"64MiB"`` for the donated footprint
            (``footprint_bytes``: what the program holds at once); ``max_peak=``
            is its older name.
        max_live_peak: a budget for the donated live peak (distinct buffers
            live at once, see docs/peaks.md).
        new: output paths meant to be new buffers (``"out[1]"``,
            ``"out.logits"``, a list or comma-separated; ``*`` matches any run
            of characters): never a break of in place, even where a donated
            input of their size exists.

    Returns:
        ``function`` unchanged, so ``case`` also works as a decorator::

            @fieldmem.case(args=lambda: (jnp.zeros((1024, 1024)),), expect="in-place")
            @jax.jit
            def update(u):
                return u.at[0].set(1.0)
    """
    module_globals = sys._getframe(1).f_globals
    settings = _settings(
        "case",
        module_globals,
        args,
        name,
        donate,
        static,
        expect,
        footprint_budget(max_footprint, max_peak),
        max_live_peak,
        new,
        budget_label="max_footprint=" if max_footprint is not None else "max_peak=",
    )

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise OptionError(f"fieldmem.case() registers a function, got {type(fn).__name__}")
        _register(module_globals, Case(function=fn, **settings))
        return fn

    if function is None:
        return register
    return register(function)


def chain(
    *steps: Callable[..., Any],
    args: Callable[[], Any] | None = None,
    name: str | None = None,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    expect: str | None = None,
    max_footprint: str | int | None = None,
    max_live_peak: str | int | None = None,
    max_peak: str | int | None = None,
    step_args: Mapping[Any, Callable[[], Any]] | None = None,
) -> tuple[Callable[..., Any], ...]:
    """Register an update chain: ``steps[0]`` is called with ``args()``, each next step with the
    previous step's outputs (a plain tuple is spread into positional arguments, unless the
    next step takes exactly one).

    fieldmem checks every step with and without donation, the hand-offs
    between them, and the whole chain composed and jitted as one function.
    ``donate`` and ``static`` name arguments of the first step (and of the
    fused chain, which takes the same arguments); ``"all"`` and ``"none"``
    apply to every step. ``expect="in-place"`` fails the check when any step
    breaks in place; ``max_footprint``/``max_live_peak`` budget every step and the
    fused chain. Example::

        fieldmem.chain(create_field, update1, update2, args=lambda: (jnp.ones(n),), expect="in-place")

    ``step_args`` gives a step arguments that do not come from the step before
    (a per-step gradient, a batch): it maps a step (the function, its name, or
    its number from 1 as the report counts) to a factory returning those
    extras, ``(g,)`` or ``((g,), {"lr": lr})``; the step is called as
    ``step(*state, *extras)``. Extras are not state: never donated, never
    "kept alive", left out of the hand-off checks; the fused chain takes them
    as arguments too::

        fieldmem.chain(init, step, step, args=lambda: (key,), step_args={"step": lambda: (grads,)})

    Returns:
        ``steps``, unchanged.
    """
    module_globals = sys._getframe(1).f_globals
    settings = _settings(
        "chain",
        module_globals,
        args,
        name,
        donate,
        static,
        expect,
        footprint_budget(max_footprint, max_peak),
        max_live_peak,
        budget_label="max_footprint=" if max_footprint is not None else "max_peak=",
    )
    if len(steps) < 2:
        raise OptionError(f"fieldmem.chain() needs at least two steps, got {len(steps)}")
    for n, step in enumerate(steps):
        if not callable(step):
            raise OptionError(f"fieldmem.chain() step {n + 1} is a {type(step).__name__}, not a function")
    factories = step_factories(steps, step_args)
    for n, factory in enumerate(factories):
        if factory is not None and not callable(factory):
            raise OptionError(
                f"fieldmem.chain(step_args=...) for step {n + 1} must be a callable returning its extras, got "
                f"{type(factory).__name__}: wrap it, e.g. lambda: (g,)"
            )
    _register(module_globals, Case(function=steps[0], steps=tuple(steps), step_args=factories, **settings))
    return steps


def step_names(fn: Callable[..., Any]) -> set[str]:
    """The names a ``step_args`` key may give a step: its ``__name__`` and ``__qualname__`` (a jit
    object's function's too)."""
    names = set()
    for obj in (fn, getattr(fn, "_fun", None), getattr(fn, "__wrapped__", None)):
        for attr in ("__name__", "__qualname__"):
            value = getattr(obj, attr, None)
            if isinstance(value, str):
                names.add(value)
    return names


def step_factories(
    steps: tuple[Callable[..., Any], ...], step_args: Mapping[Any, Any] | None, what: str = "fieldmem.chain"
) -> tuple[Any, ...]:
    """``step_args`` as one entry per step (None: the step takes no extras).

    Raises:
        OptionError: a key that names no step, or one step given extras twice.
    """
    if not step_args:
        return ()
    if not isinstance(step_args, Mapping):
        raise OptionError(
            f"{what}(step_args=...) maps a step to its extras, e.g. step_args={{'update': lambda: (g,)}}, "
            f"got {type(step_args).__name__}"
        )
    chosen: list[Any] = [None] * len(steps)
    for key, value in step_args.items():
        if isinstance(key, int) and not isinstance(key, bool):
            matching = [key - 1] if 1 <= key <= len(steps) else []
        elif isinstance(key, str):
            matching = [n for n, fn in enumerate(steps) if key in step_names(fn)]
        else:
            matching = [n for n, fn in enumerate(steps) if fn is key]
        if not matching:
            names = ", ".join(f"{n + 1} ({getattr(fn, '__name__', 'step')})" for n, fn in enumerate(steps))
            raise OptionError(f"{what}(step_args=...): {key!r} names no step of the chain (steps: {names})")
        for n in matching:
            if chosen[n] is not None:
                raise OptionError(f"{what}(step_args=...): step {n + 1} is given extras twice")
            chosen[n] = value
    return tuple(chosen)


def _settings(
    what: str,
    module_globals: dict[str, Any],
    args: Any,
    name: Any,
    donate: Any,
    static: Any,
    expect: str | None,
    max_peak: Any,
    max_live_peak: Any,
    new: Any = None,
    budget_label: str = "max_footprint=",
) -> dict[str, Any]:
    module = module_globals.get("__name__", "__main__")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise OptionError(f"fieldmem.{what}(name={name!r}) must be a non-empty string")
    settings = dict(
        args=args,
        name=name,
        donate=DonateSpec.parse(donate, "donate="),
        static=StaticSpec.parse(static, "static="),
        expect=parse_expect(expect, "expect="),
        max_peak=parse_bytes(max_peak, budget_label) if max_peak is not None else None,
        max_live_peak=parse_bytes(max_live_peak, "max_live_peak=") if max_live_peak is not None else None,
        module=module,
        new=parse_new(new, "new="),
    )
    if args is not None and not callable(args):
        raise OptionError(
            f"fieldmem.{what}(args=...) must be a callable returning the arguments, got {type(args).__name__}: "
            "wrap it, e.g. args=lambda: (x, y)"
        )
    return settings


def _register(module_globals: dict[str, Any], registered: Case) -> None:
    module = registered.module
    owner, cases = _REGISTRY.get(module, (module_globals, []))
    if owner is not module_globals:  # the module was imported again
        cases = []
    cases.append(registered)
    _REGISTRY[module] = (module_globals, cases)


def registered_cases(module: str | ModuleType) -> list[Case]:
    """The cases registered while importing ``module``, in registration order.

    Given the module itself, only the cases its current execution registered: a module executed
    again (``--watch`` after an edit) that registers nothing has nothing, not the cases of its
    earlier execution.
    """
    if isinstance(module, ModuleType):
        owner, cases = _REGISTRY.get(module.__name__, (None, []))
        return list(cases) if owner is vars(module) else []
    return list(_REGISTRY.get(module, (None, []))[1])
