"""Turn ``pkg.module:fn``, ``path/to/file.py:fn`` or a bare module into targets.

A :class:`Target` remembers what the user typed, the function found, where its
example arguments come from and the options that apply to it. Loading never
prints; a spec that cannot be loaded raises :class:`TargetError` with a
suggestion. The args factory is *not* called here: it runs per target in the
checker, so one broken factory does not hide the other targets.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fieldmem.model.errors import ArgumentsError, TargetError, quoted
from fieldmem.model.libraries import install_targets
from fieldmem.model.word_sets import Expectation
from fieldmem.request.registry import Case, registered_cases
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = [
    "ChainTarget",
    "Step",
    "Target",
    "TargetOptions",
    "definition_of",
    "describe_chain",
    "describe_target",
    "described_chain",
    "described_target",
    "display_path",
    "folder_targets",
    "fused_result_name",
    "given_name",
    "in_hand",
    "in_hand_key",
    "in_hand_name",
    "is_file_spec",
    "is_installed",
    "jit_definition_of",
    "load_module",
    "module_file",
    "resolve_object",
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
            f"args factory {origin} returned {_a(type(value).__name__)}, not an argument tuple: "
            "return (arg0, arg1, ...) or ((args...), {kwargs...}); for one argument write (x,)"
        )
    return value, {}


def definition_of(fn: Any) -> str | None:
    """``file.py:LINE`` of the ``def`` behind ``fn``, or None.

    Wrappers are unwrapped as far as they go: ``functools.partial`` (and equinox's ``Partial``), a bound
    method (``solver.advance``), a ``jax.jit`` object (its ``_fun``), then the ``__wrapped__`` chain
    (``flax.nnx.jit`` and ``equinox.filter_jit`` set it to the user's function).
    """
    target = fn
    for _ in range(16):
        if isinstance(target, functools.partial) or type(target).__name__ == "Partial":
            target = getattr(target, "func", target)
        elif inspect.ismethod(target):
            target = target.__func__
        elif getattr(target, "_fun", None) is not None and hasattr(target, "lower"):
            target = target._fun
        else:
            break
    if callable(target):
        try:
            target = inspect.unwrap(target)
        except ValueError:  # a __wrapped__ cycle
            pass
    try:
        file = inspect.getsourcefile(target)
        _, line = inspect.getsourcelines(target)
    except (TypeError, OSError):
        return None
    if file is None:
        return None
    return f"{display_path(file)}:{line}"


_DONATION_KEYWORDS = ("donate_argnums", "donate_argnames", "donate")


def jit_definition_of(fn: Any, module: ModuleType | None, name: str) -> str | None:
    """``file.py:LINE`` where ``fn``, a jit object the user named ``name`` in ``module``, gets its donation:
    the line of its ``donate_argnums``/``donate_argnames`` keyword in ``name = jax.jit(step, ...)`` or in a
    ``@partial(jax.jit, ...)`` decorator of ``def name``, else the line of that assignment or decorator. None
    for a plain function, or where the module's source does not say (a jit made in a function, no file)."""
    if getattr(fn, "_fun", None) is None or not hasattr(fn, "lower") or module is None or "." in name:
        return None
    try:
        file = inspect.getsourcefile(module)
        source = Path(file).read_text(encoding="utf-8") if file else None
    except (TypeError, OSError, UnicodeDecodeError):
        return None
    if source is None or file is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    line = _jit_line(tree, name)
    return f"{display_path(file)}:{line}" if line is not None else None


def _jit_line(tree: ast.Module, name: str) -> int | None:
    """The line of ``name``'s jit in a module's top level (see :func:`jit_definition_of`)."""
    found: int | None = None
    for node in tree.body:
        calls: list[ast.expr] = []
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            calls = [node.value]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            calls = [node.value] if node.value is not None else []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            calls = list(node.decorator_list)
        else:
            continue
        found = calls[0].lineno if calls else node.lineno  # the last binding of the name wins, as in Python
        for call in calls:
            for inner in ast.walk(call):
                if isinstance(inner, ast.keyword) and inner.arg in _DONATION_KEYWORDS:
                    found = inner.value.lineno
                    break
    return found


_INSTALLED = ("site-packages", "dist-packages")


def display_path(file: str, cwd: str | None = None) -> str:
    """``file`` relative to the working directory (``cwd``, or the process's) when it lies below it, else as
    given; a file of an installed package (in site-packages, or a folder pip installed into on the path) from
    the package on (``optax/_src/transform.py``), the same on every machine."""
    return _display_path(file, os.getcwd() if cwd is None else cwd)


@functools.lru_cache(maxsize=8192)
def _display_path(file: str, cwd: str) -> str:
    # per working directory: a peak's thousands of frames name a few files (relpath is the cost)
    parts = file.replace("\\", "/").split("/")
    for folder in _INSTALLED:
        if folder in parts[:-1]:
            return "/".join(parts[len(parts) - parts[::-1].index(folder) :])
    for target in install_targets():  # pip install --target DIR, DIR on the path: as site-packages
        if file.startswith(target + os.sep):
            return file[len(target) + 1 :].replace("\\", "/")
    try:
        relative = os.path.relpath(file, cwd)
    except ValueError:
        return file
    return relative if not relative.startswith("..") else file


def is_installed(file: str) -> bool:
    """``file`` lies in an installed package (a ``site-packages`` or ``dist-packages`` folder)."""
    return any(folder in file.replace("\\", "/").split("/")[:-1] for folder in _INSTALLED)


def module_file(module_name: str) -> str | None:
    """The file of the module ``pkg.model``: the loaded module's, else the one importing it from the
    current folder would load (looked up on the file system, nothing imported); None when there is none
    (not found, a namespace package, a built-in module).

    Lets a target written as a module (``pkg.model:update``) be named like the same target written as a
    file (``pkg/model.py:update``) in a process that does not import the user's code (the CLI's parent).
    """
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return str(file) if file else None
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        return None
    from importlib.machinery import PathFinder

    search: list[str] | None = [os.getcwd(), *(p or os.getcwd() for p in sys.path if isinstance(p, str))]
    found = None
    parts = module_name.split(".")
    for n in range(len(parts)):
        try:
            found = PathFinder.find_spec(".".join(parts[: n + 1]), search)
        except (ImportError, ValueError, OSError):
            return None
        if found is None:
            return None
        search = list(found.submodule_search_locations or []) if n + 1 < len(parts) else None
        if n + 1 < len(parts) and not search:
            return None
    origin = found.origin if found is not None else None
    return origin if origin and os.path.isfile(origin) else None


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


def is_file_spec(module_part: str) -> bool:
    """``path/to/file.py`` (or any path with a separator) rather than ``pkg.module``."""
    return module_part.endswith(".py") or "/" in module_part or os.sep in module_part


def load_module(module_part: str) -> ModuleType:
    """Import ``pkg.module`` or load ``path/to/file.py`` (its folder goes on sys.path)."""
    if is_file_spec(module_part):
        path = Path(module_part)
        if not path.is_file():
            hint = " (a module is written pkg.module, a file path/to/file.py)" if not path.suffix else ""
            raise TargetError(f"file {quoted(module_part)} does not exist{hint}")
        path = path.resolve()
        _refuse_non_utf8(module_part, str(path))
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = path.stem
        existing = sys.modules.get(name)
        if existing is not None:
            if (file := getattr(existing, "__file__", None)) and Path(file).resolve() == path:
                return existing
            name = f"_fieldmem_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
            if name in sys.modules:
                return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(f"file {quoted(module_part)} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            del sys.modules[name]
            raise TargetError(f"loading {quoted(module_part)} raised {_describe(exc)}") from exc
        return module

    if not all(part.isidentifier() for part in module_part.split(".")):
        raise TargetError(
            f"{quoted(module_part)} is not a module name: use the form pkg.module:function or path/to/file.py:function"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_part == missing or module_part.startswith(missing + ".")):
            raise TargetError(
                f"module {quoted(module_part)} not found: is it installed or under the current directory? "
                "(a file also works: path/to/model.py:function)"
            ) from exc
        raise TargetError(f"importing {quoted(module_part)} raised {_describe(exc)}") from exc
    except (Exception, SystemExit) as exc:
        raise TargetError(f"importing {quoted(module_part)} raised {_describe(exc)}") from exc


def _refuse_non_utf8(module_part: str, path: str) -> None:
    """A file whose path has a byte that is not UTF-8 (decoded by Python as a lone surrogate, ``\\udcff``) is
    refused: jax records the file of each line it traces, and fails on such a name (``std::bad_cast``).

    Raises:
        TargetError: the path is not valid UTF-8.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        found = ord(exc.object[exc.start])
        byte = f"the byte 0x{found - 0xDC00:02x}" if 0xDC80 <= found <= 0xDCFF else f"{chr(found)!r}"
        raise TargetError(
            f"file {quoted(module_part)}: its path holds {byte}, which is not UTF-8, and jax cannot compile code "
            "from such a file: rename it (or the folder holding it)"
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) (it calls sys.exit() at import: guard it with if __name__ == '__main__')"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _a(noun: str) -> str:
    """``int`` -> ``an int``, ``tuple`` -> ``a tuple``."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def resolve_object(module: ModuleType, module_part: str, attr_path: str) -> Any:
    """``obj.attr`` inside ``module``, with a close-name suggestion when missing."""
    obj: Any = module
    walked = module_part
    for part in attr_path.split("."):
        if not part.isidentifier():
            raise TargetError(f"{quoted(attr_path)} is not an attribute path: use function or obj.method")
        try:
            value = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("__")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            what = "module" if isinstance(obj, ModuleType) else type(obj).__name__
            raise TargetError(f"{what} {quoted(walked)} has no {quoted(part)}{hint}") from None
        except Exception as exc:
            raise TargetError(f"reading {quoted(part)} of {quoted(walked)} raised {_describe(exc)}") from exc
        obj = value
        walked = f"{walked}:{part}" if walked == module_part else f"{walked}.{part}"
    return obj


def _load_factory(spec: str, module: ModuleType | None = None, module_name: str = "") -> tuple[Callable[[], Any], str]:
    """The ``--args`` factory: ``MODULE:FACTORY``, or a bare ``FACTORY`` in the target's own module."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep and spec.strip() and module is not None:
        attr = spec.strip()
        # a bare name is looked up beside the target (a factory in the target's own module)
        if all(part.isidentifier() for part in attr.split(".")):
            try:
                factory = resolve_object(module, module_name, attr)
            except TargetError as exc:
                raise ArgumentsError(
                    f"--args {quoted(spec)}: the target's module {module_name!r} has no {attr!r} "
                    f"({exc.message}); name another module's factory as MODULE:FACTORY"
                ) from exc
            if not callable(factory):
                raise ArgumentsError(
                    f"--args {quoted(spec)} is {_a(type(factory).__name__)}, not a callable returning the arguments"
                )
            return factory, f"{module_name}:{attr}"
    if not sep or not module_part or not attr:
        raise ArgumentsError(
            f"--args {quoted(spec)} is not FACTORY or MODULE:FACTORY (e.g. --args make_args, a factory in the "
            "target's module, or --args pkg.model:make_args)"
        )
    try:
        factory = resolve_object(load_module(module_part), module_part, attr)
    except TargetError as exc:
        raise ArgumentsError(f"--args {quoted(spec)}: {exc.message}") from exc
    if not callable(factory):
        raise ArgumentsError(
            f"--args {quoted(spec)} is {_a(type(factory).__name__)}, not a callable returning the arguments"
        )
    return factory, spec


def _from_case(
    spec: str, case: Case, options: TargetOptions, module_name: str, module: ModuleType | None = None
) -> Target:
    factory: Callable[[], Any] | None = case.args
    origin = None
    if case.args is not None:
        origin = f"{module_name}:{getattr(case.args, '__qualname__', 'args')}"
    shapes = None
    if options.args is not None:
        factory, origin = _load_factory(options.args, module, module_name)
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
        jit_definition=jit_definition_of(case.function, module or _module_of(case.function), fn_name),
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
                f"step {quoted(part)} of chain {quoted(spec)} is {_a(type(obj).__name__)}, not a function"
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
        raise TargetError(f"{quoted(spec)} is {_a(type(obj).__name__)}, not a function: point at the update function")
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


# ----------------------------------------------------------------------------
# A function (or a chain) in hand, with its arguments: the Python API, the pytest plugin's checks (in
# the caller's process, or in a worker from what fieldmem.driver.sendable sent)


def _callable_name(fn: Callable[..., Any]) -> str:
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
    from fieldmem.model.units import parse_bytes
    from fieldmem.request.options import parse_new

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
        jit_definition=jit_definition_of(fn, _module_of(fn), given_name(fn)),
    )


def _module_of(fn: Any) -> ModuleType | None:
    """The module the function behind ``fn`` is defined in (None: not imported)."""
    return sys.modules.get(getattr(getattr(fn, "_fun", fn), "__module__", None) or "")


def in_hand_name(kind: str, subject: Any, name: str | None) -> str:
    """The name :func:`in_hand` gives a function (``module:qualname``) or a chain (``module:a,b,c``)."""
    if name:
        return name
    if kind == "function":
        return _callable_name(subject)
    steps = list(subject)
    if not steps:
        return "chain"
    names = [_callable_name(s).rpartition(":")[2] for s in steps]
    return f"{_callable_name(steps[0]).rpartition(':')[0]}:{','.join(names)}"


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
    from fieldmem.model.errors import OptionError
    from fieldmem.request.registry import step_factories

    if kind == "function":
        if not callable(subject):
            raise OptionError(
                f"{type(subject).__name__} is not callable: pass the update function first, then its arguments"
            )
        return _function_target(subject, in_hand_name(kind, subject, settings.get("name")), args, kwargs, settings)
    steps = list(subject)
    if len(steps) < 2 or not all(callable(s) for s in steps):
        raise OptionError("check_chain needs a sequence of at least two functions, then the first one's arguments")
    names = [_callable_name(s).rpartition(":")[2] for s in steps]
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
