"""Turn ``pkg.module:fn``, ``path/to/file.py:fn`` or a bare module into targets.

A :class:`Target` remembers what the user typed, the function found, where its
example arguments come from and the options that apply to it. Loading never
prints; a spec that cannot be loaded raises :class:`TargetError` with a
suggestion. The args factory is *not* called here: it runs per target in the
checker, so one broken factory does not hide the other targets. The module is
loaded in :mod:`.loading`, where the function is defined read in
:mod:`.definitions`; a function in hand becomes a target in :mod:`.in_hand`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fieldmem.model.errors import ArgumentsError, TargetError, quoted
from fieldmem.model.word_sets import Expectation
from fieldmem.request.definitions import definition_of, jit_definition_of
from fieldmem.request.loading import is_file_spec, load_factory, load_module, resolve_object, with_article
from fieldmem.request.registry import Case, registered_cases
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = [
    "ChainTarget",
    "Step",
    "Target",
    "TargetOptions",
    "describe_chain",
    "describe_target",
    "described_chain",
    "described_target",
    "folder_targets",
    "fused_result_name",
    "given_name",
    "module_of",
    "resolve_target",
    "step_result_name",
    "with_knobs",
]


@dataclass(frozen=True)
class TargetOptions:
    """Options for one target or a whole run (None: not given, the next layer down decides).

    Layers, strongest first: the command line, a ``[[tool.fieldmem.target]]``
    table, ``[tool.fieldmem]``, the registered case. :meth:`overridden_by`
    stacks two layers.
    """

    args: str | None = None
    shapes: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    donate: DonateSpec | None = None
    static: StaticSpec | None = None
    expect: Expectation | None = None
    max_peak: int | None = None
    max_live_peak: int | None = None
    new: tuple[str, ...] | None = None  # output paths declared new
    # fieldmem fit: keyword arguments the args factory is called with (its knobs, at one point of a search)
    knobs: tuple[tuple[str, bool | int | float | str], ...] | None = None

    def overridden_by(self, other: TargetOptions) -> TargetOptions:
        """These options with every setting ``other`` gives put in their place.

        ``args`` and ``shapes`` are one setting (where the example arguments
        come from): when ``other`` gives either, both come from ``other``, so a
        ``--shapes`` on the command line beats ``args`` from the config.
        """
        arguments_given = other.args is not None or other.shapes is not None
        return TargetOptions(
            args=other.args if arguments_given else self.args,
            shapes=other.shapes if arguments_given else self.shapes,
            donate=other.donate if other.donate is not None else self.donate,
            static=other.static if other.static is not None else self.static,
            expect=other.expect if other.expect is not None else self.expect,
            max_peak=other.max_peak if other.max_peak is not None else self.max_peak,
            max_live_peak=other.max_live_peak if other.max_live_peak is not None else self.max_live_peak,
            new=other.new if other.new is not None else self.new,
            knobs=other.knobs if other.knobs is not None else self.knobs,
        )


@dataclass(frozen=True)
class Target:
    """One function to check and everything needed to call it."""

    spec: str
    name: str
    function: Callable[..., Any]
    args_factory: Callable[[], Any] | None
    args_origin: str | None
    shapes: tuple[tuple[str, tuple[int, ...]], ...] | None
    donate: DonateSpec
    static: StaticSpec
    expect: Expectation
    max_peak: int | None
    definition: str | None  # file.py:LINE of the function's def
    max_live_peak: int | None = None
    # the options resolve_target was given: a worker process resolves the spec again with them
    options: TargetOptions | None = None
    new: tuple[str, ...] = ()  # output paths declared new: never a break of in place
    # file.py:LINE where the target's own jax.jit sets its donation (the donate_argnums keyword, else the jit's
    # line): where a donation is changed; None for a plain function or where it cannot be read
    jit_definition: str | None = None

    def example_arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Call the args factory and check what it returns: ``args`` or ``(args, kwargs)``.

        A target given ``--shapes`` has no factory: its arguments are the
        abstract arrays of :attr:`shapes`, which only the driver can make
        (``fieldmem.driver.shape_structs``; the checker does).
        """
        if self.args_factory is None and self.shapes is not None:
            raise ArgumentsError(f"the example arguments of {self.name} are its --shapes: the driver makes them")
        if self.args_factory is None:
            raise ArgumentsError(
                f"no example arguments for {self.name}: pass --args MODULE:FACTORY or "
                "--shapes 'f32[...] ...', or register it with fieldmem.case(fn, args=...)"
            )
        origin = self.args_origin or str(getattr(self.args_factory, "__qualname__", "the args factory"))
        try:
            value = self.args_factory()
        except (Exception, SystemExit) as exc:
            text = str(exc).strip().splitlines()
            raise ArgumentsError(
                f"args factory {origin} raised {type(exc).__name__}" + (f": {text[0]}" if text else "")
            ) from exc
        return _split_arguments(value, origin)


@dataclass(frozen=True)
class Step:
    """One step of a chain: the function and how to name it."""

    name: str
    function: Callable[..., Any]
    definition: str | None
    # the factory of the extras the step takes after its state (a per-step gradient, a batch), or None
    extras: Callable[[], Any] | None = None

    def extra_arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Call the extras factory: ``(args, kwargs)`` (nothing when the step takes no extras)."""
        if self.extras is None:
            return (), {}
        origin = f"step_args of {self.name}"
        try:
            value = self.extras()
        except (Exception, SystemExit) as exc:
            text = str(exc).strip().splitlines()
            raise ArgumentsError(f"{origin} raised {type(exc).__name__}" + (f": {text[0]}" if text else "")) from exc
        return _split_arguments(value, origin)


@dataclass(frozen=True)
class ChainTarget:
    """An update chain: ``steps[0]`` takes the example arguments, each next step the previous one's outputs.

    ``first`` carries the chain's spec, name, arguments and options (its
    function is the first step); the checker checks each step with it, and
    the fused chain.
    """

    first: Target
    steps: tuple[Step, ...]

    @property
    def spec(self) -> str:
        return self.first.spec

    @property
    def name(self) -> str:
        return self.first.name


def _elsewhere(*args: Any, **kwargs: Any) -> Any:
    raise TargetError("this target's function lives in fieldmem's worker process, not here")


def describe_target(target: Target) -> dict[str, Any]:
    """What a process without the user's code knows of ``target``: its plain fields (its function, factory and
    the options it was resolved with stay where its module was imported). Read back by :func:`described_target`."""
    return {
        "spec": target.spec,
        "name": target.name,
        "definition": target.definition,
        "donate": [target.donate.mode, list(target.donate.items)],
        "static": list(target.static.items),
        "expect": target.expect,
        "max_peak": target.max_peak,
        "max_live_peak": target.max_live_peak,
        "new": list(target.new),
        "jit_definition": target.jit_definition,
    }


def described_target(data: dict[str, Any]) -> Target:
    """The :class:`Target` :func:`describe_target` wrote, its function a stand-in that raises when called."""
    mode, items = data["donate"]
    return Target(
        spec=str(data["spec"]),
        name=str(data["name"]),
        function=_elsewhere,
        args_factory=None,
        args_origin=None,
        shapes=None,
        donate=DonateSpec(str(mode), tuple(items)),
        static=StaticSpec(tuple(data["static"])),
        expect=data["expect"],
        max_peak=data["max_peak"],
        definition=data["definition"],
        max_live_peak=data["max_live_peak"],
        new=tuple(data["new"]),
        jit_definition=data.get("jit_definition"),
    )


def describe_chain(chain: ChainTarget) -> dict[str, Any]:
    """:func:`describe_target` of a chain: its first target, and each step's name and definition."""
    return {
        "first": describe_target(chain.first),
        "steps": [[step.name, step.definition, step.extras is not None] for step in chain.steps],
    }


def described_chain(data: dict[str, Any]) -> ChainTarget:
    """The :class:`ChainTarget` :func:`describe_chain` wrote (functions and factories are stand-ins)."""
    steps = tuple(
        Step(str(name), _elsewhere, definition, _elsewhere if extras else None)
        for name, definition, extras in data["steps"]
    )
    return ChainTarget(described_target(data["first"]), steps)


def step_result_name(chain_name: str, index: int, function: str) -> str:
    """The name of step ``index`` (0-based) of a chain's results: ``forward:chain[2:update1]``."""
    return f"{chain_name}[{index + 1}:{function}]"


def fused_result_name(chain_name: str) -> str:
    """The name of a chain fused into one jit among its results: ``forward:chain[fused]``."""
    return f"{chain_name}[fused]"


def _split_arguments(value: Any, origin: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and type(value) is tuple
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], dict)
        and all(isinstance(k, str) for k in value[1])
    ):
        return tuple(value[0]), dict(value[1])
    if isinstance(value, list):
        value = tuple(value)
    if type(value) is not tuple:
        raise ArgumentsError(
            f"args factory {origin} returned {with_article(type(value).__name__)}, not an argument tuple: "
            "return (arg0, arg1, ...) or ((args...), {kwargs...}); for one argument write (x,)"
        )
    return value, {}


def _from_case(
    spec: str, case: Case, options: TargetOptions, module_name: str, module: ModuleType | None = None
) -> Target:
    factory: Callable[[], Any] | None = case.args
    origin = None
    if case.args is not None:
        origin = f"{module_name}:{getattr(case.args, '__qualname__', 'args')}"
    shapes = None
    if options.args is not None:
        factory, origin = load_factory(options.args, module, module_name)
    elif options.shapes is not None:
        shapes = options.shapes
        factory, origin = None, "--shapes"  # abstract arrays, made by the driver from ``shapes``
    if options.knobs is not None:
        factory, origin = with_knobs(factory, origin, options.knobs)
    fn_name = _function_name(case.function, module)
    return Target(
        spec=spec,
        name=case.name or f"{module_name}:{fn_name}",
        function=case.function,
        args_factory=factory,
        args_origin=origin,
        shapes=shapes,
        donate=options.donate or case.donate,
        static=options.static or case.static,
        expect=options.expect or case.expect or "any",
        max_peak=options.max_peak if options.max_peak is not None else case.max_peak,
        max_live_peak=options.max_live_peak if options.max_live_peak is not None else case.max_live_peak,
        definition=definition_of(case.function),
        options=options,
        new=options.new if options.new is not None else case.new or (),
        jit_definition=jit_definition_of(case.function, module or module_of(case.function), fn_name),
    )


def _function_name(fn: Any, module: ModuleType | None = None) -> str:
    """The name a target, a case or a chain step is shown and keyed by: :func:`given_name`."""
    return given_name(fn, module)


def given_name(fn: Any, module: ModuleType | None = None) -> str:
    """The name the user gave ``fn`` in ``module`` (default: the module its function is defined in): the
    module's attribute that is ``fn`` itself, so that a jit alias ``step_donated = jax.jit(step,
    donate_argnums=0)`` is ``step_donated`` wherever it is checked (the CLI, a registered case, the API, the
    pytest plugin), and two jits of one function have two names. Its own ``__qualname__`` where that
    attribute is it (a decorated ``@jax.jit def step``), or where no attribute is (a function made in a test,
    a method: ``Solver.advance``)."""
    inner = getattr(fn, "_fun", fn)
    qualname = str(getattr(fn, "__qualname__", None) or getattr(inner, "__qualname__", None) or "function")
    if module is None:
        module = sys.modules.get(getattr(inner, "__module__", None) or "")
    if module is None or "." in qualname or "<" in qualname:
        return qualname
    try:
        names = [key for key, value in vars(module).items() if value is fn]
    except TypeError:  # a module object without a __dict__
        return qualname
    if not names or qualname in names:
        return qualname
    return names[0]


def with_knobs(
    factory: Callable[..., Any] | None, origin: str | None, knobs: tuple[tuple[str, Any], ...]
) -> tuple[Callable[[], Any], str]:
    """The args ``factory`` called with the keyword arguments ``knobs`` (``fieldmem fit``'s point), and its
    origin naming them: ``pkg.train:make_args(batch=256, remat='dots')``.

    Raises:
        ArgumentsError: there is no factory (``--shapes``, no ``--args``), or it takes no parameter of a
            knob's name (naming those it takes).
    """
    shown = ", ".join(f"{name}={value!r}" for name, value in knobs)
    if factory is None:
        names = ", ".join(name for name, _ in knobs) or "its knobs"
        raise ArgumentsError(
            f"fieldmem fit varies the keyword parameters of an args factory ({names}), and "
            f"{'--shapes gives' if origin == '--shapes' else 'this target has'} none: pass --args MODULE:FACTORY"
        )
    origin = origin or str(getattr(factory, "__qualname__", "the args factory"))
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or a callable without a signature: its call says
        parameters = None
    if parameters is not None and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for name, _ in knobs:
            if name not in takes:
                close = difflib.get_close_matches(name, takes, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                listed = f"it takes {', '.join(takes)}" if takes else "it takes no keyword parameter"
                raise ArgumentsError(f"args factory {origin} has no parameter {name!r} to vary ({listed}){hint}")
    return functools.partial(factory, **dict(knobs)), f"{origin}({shown})"


def _chain_from_case(
    spec: str,
    case: Case,
    options: TargetOptions,
    module_name: str,
    names: list[str] | None = None,
    module: ModuleType | None = None,
) -> ChainTarget:
    extras = case.step_args or (None,) * len(case.steps)
    steps = tuple(
        Step(
            name=names[n] if names else _function_name(fn, module),
            function=fn,
            definition=definition_of(fn),
            extras=extras[n],
        )
        for n, fn in enumerate(case.steps)
    )
    joined = ",".join(s.name for s in steps)
    first = _from_case(
        spec, dataclasses.replace(case, name=case.name or f"{module_name}:{joined}"), options, module_name, module
    )
    return ChainTarget(first=first, steps=steps)


def _resolve_chain(
    spec: str,
    module: ModuleType,
    module_part: str,
    attr: str,
    options: TargetOptions,
    cases: list[Case],
    module_name: str,
) -> list[Target | ChainTarget]:
    names = [part.strip() for part in attr.split(",")]
    if any(not n for n in names):
        raise TargetError(
            f"chain {quoted(spec)} has an empty step: name each step, e.g. {module_part}:create,update1,update2"
        )
    functions = []
    for part in names:
        obj = resolve_object(module, module_part, part)
        if not callable(obj):
            raise TargetError(
                f"step {quoted(part)} of chain {quoted(spec)} is {with_article(type(obj).__name__)}, not a function"
            )
        functions.append(obj)
    registered = [c for c in cases if c.is_chain and list(c.steps) == functions]
    if registered:
        return [_chain_from_case(spec, c, options, module_name, names, module) for c in registered]
    # the first step's own registered case lends its example arguments and options
    first_case = next((c for c in cases if not c.is_chain and c.function is functions[0]), None)
    base = first_case or Case(
        function=functions[0],
        args=None,
        name=None,
        donate=DonateSpec(),
        static=StaticSpec(),
        expect=None,
        max_peak=None,
        module=module_name,
    )
    chain_case = dataclasses.replace(base, name=f"{module_name}:{attr}", steps=tuple(functions))
    return [_chain_from_case(spec, chain_case, options, module_name, names, module)]


def folder_targets(spec: str) -> tuple[str, ...] | None:
    """The file targets of a folder target (``examples/``), or None when ``spec`` is not a folder.

    A folder (written as a path: ``examples/``, ``./examples``; a bare name is a module) stands for
    every ``*.py`` file directly in it whose text mentions
    ``fieldmem`` (a module that does not cannot register a case, and is not
    imported: a ``setup.py`` or a script is never run), except files whose
    name starts with ``_``; sorted by name, each as ``folder/file.py``.
    Sub-folders are not entered. Nothing is imported here.
    """
    folder = Path(spec.strip())
    # a bare name (``userpkg``) is a module, a package among them; a folder is written as a path
    if not spec.strip() or not is_file_spec(spec.strip()) or not folder.is_dir():
        return None
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_") or not path.is_file():
            continue
        try:
            mentions = b"fieldmem" in path.read_bytes()
        except OSError:
            mentions = True  # unreadable: loading it says why
        if mentions:
            found.append(os.path.join(spec.strip(), path.name))
    return tuple(found)


def _defined_here(module: ModuleType) -> list[str]:
    """The public functions ``module`` defines itself (a jit of one included), not those it imported
    (``functools.partial``, ``jnp``): what a suggestion may name."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or not callable(value) or isinstance(value, type):
            continue
        inner = getattr(value, "__wrapped__", None) or getattr(value, "_fun", None) or value
        if getattr(inner, "__module__", None) == module.__name__:
            names.append(name)
    return names


def resolve_target(spec: str, options: TargetOptions, *, in_folder: bool = False) -> list[Target | ChainTarget]:
    """All targets named by ``spec``.

    ``module:fn`` gives that function (with its registered cases' settings
    when it has any); ``module:a,b,c`` the chain of those steps; a bare
    module or file gives every case and chain it registers. ``in_folder``:
    ``spec`` is a file of a folder target (:func:`folder_targets`), where a
    file that registers no case is no target (an empty list), not an error.

    Raises:
        TargetError: the module, file or attribute cannot be found, the object
            is not callable, or a bare module registers no case.
    """
    spec = spec.strip()
    if not spec:
        raise TargetError("an empty target was given: use pkg.module:function or path/to/file.py:function")
    module_part, sep, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if sep and not attr:
        raise TargetError(f"target {quoted(spec)} ends with ':': name the function, e.g. {module_part}:update")
    if ":" in module_part:
        head, _, function = module_part.partition(":")
        raise TargetError(
            f"target {quoted(spec)} has more than one ':': write module:function or file.py:function, and a "
            f"method or attribute with dots ({head}:{function}.{attr})"
        )
    if not sep and is_file_spec(module_part) and Path(module_part).is_dir():
        raise TargetError(f"{quoted(spec)} is a folder: check it as a target of its own (fieldmem check {spec})")
    module = load_module(module_part)
    cases = registered_cases(module)
    # names shown to the user: the path as typed for a file, the dotted name otherwise
    module_name = module_part if is_file_spec(module_part) else module.__name__
    if not sep:
        if not cases and in_folder:
            return []
        if not cases:
            public = _defined_here(module)
            example = f" (e.g. {module_part}:{public[0]})" if public else ""
            raise TargetError(
                f"{quoted(module_part)} registers no fieldmem.case(...): name a function instead{example}, "
                "or register cases in the module"
            )
        return [
            _chain_from_case(spec, case, options, module_name, module=module)
            if case.is_chain
            else _from_case(spec, case, options, module_name, module)
            for case in cases
        ]
    if "," in attr:
        return _resolve_chain(spec, module, module_part, attr, options, cases, module_name)

    obj = resolve_object(module, module_part, attr)
    if not callable(obj):
        raise TargetError(
            f"{quoted(spec)} is {with_article(type(obj).__name__)}, not a function: point at the update function"
        )
    matching = [c for c in cases if c.function is obj and not c.is_chain]
    if matching:
        return [_from_case(spec, case, options, module_name, module) for case in matching]
    bare = Case(
        function=obj,
        args=None,
        name=f"{module_name}:{attr}",
        donate=DonateSpec(),
        static=StaticSpec(),
        expect=None,
        max_peak=None,
        module=module_name,
    )
    return [_from_case(spec, bare, options, module_name, module)]


def module_of(fn: Any) -> ModuleType | None:
    """The module the function behind ``fn`` is defined in (None: not imported)."""
    return sys.modules.get(getattr(getattr(fn, "_fun", fn), "__module__", None) or "")
