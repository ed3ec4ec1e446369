"""Check a function object from Python: ``check_function`` and ``assert_in_place``.

``fieldmem check`` starts from a target string; tests and notebooks already
hold the function and its arguments. This module wraps them in a
:class:`~fieldmem.request.target.Target` and runs the same checker
(:func:`fieldmem.engine.checker.check_targets`), so a verdict here is the verdict the
CLI gives. It computes nothing of its own.

It never prints. jax is imported only when a check runs (through the checker),
so ``import fieldmem`` stays free of jax.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fieldmem.errors import FieldmemError, OptionError
from fieldmem.report import DeviceInfo, Expectation, Report
from fieldmem.request.options import MIN_BYTES, CheckOptions, parse_backends, parse_expect, parse_new
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.units import parse_bytes
from fieldmem.version import __version__

if TYPE_CHECKING:
    from fieldmem.request.target import Target

__all__ = [
    "NotInPlaceError",
    "assert_in_place",
    "check_chain",
    "check_function",
    "combine_reports",
    "failure_message",
]


class NotInPlaceError(AssertionError):
    """An update is not in place with donation, or exceeds a memory budget.

    An ``AssertionError``, so pytest reports it as a test failure. The message
    is the CLI's table for this one target (verdict, findings with source
    lines, checks); ``report`` holds the whole :class:`~fieldmem.report.Report`.
    """

    __module__ = "fieldmem"  # shown as fieldmem.NotInPlaceError, where users import it from

    def __init__(self, report: Report) -> None:
        super().__init__(failure_message(report))
        self.report = report


def failure_message(report: Report, width: int = 160) -> str:
    """What a failed check says: one line per failed check, then the CLI's table text.

    A failed ``expect-in-place`` is told by the verdict's summary (which names
    the field, the line and the fix), a budget by its check's message; the
    table renderer (no color) formats the rest. Nothing here is computed.
    """
    from fieldmem.render import RenderOptions, get_renderer

    lines = []
    for result in report.results:
        for check in result.failed_checks:
            if check.name == "expect-in-place" and result.verdict is not None:
                lines.append(f"{result.name}: {result.verdict.summary}")
            else:
                lines.append(f"{result.name}: {check.name}: {check.message}")
    for chain in report.chains:
        for check in chain.failed_checks:
            lines.append(f"chain {chain.name}: {chain.summary if check.name == 'expect-in-place' else check.message}")
    table = get_renderer("table").render(report, RenderOptions(min_bytes=report.min_bytes, width=width))
    return "\n".join([*lines, table.rstrip()])


def _function_name(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of ``fn`` (of the function inside a ``jax.jit`` object)."""
    inner = getattr(fn, "_fun", fn)
    qualname = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or type(fn).__name__
    module = getattr(inner, "__module__", None)
    return f"{module}:{qualname}" if module else qualname


def _size(value: int | str | None, option: str) -> int | None:
    return None if value is None else parse_bytes(value, option)


def _error_class(kind: str) -> type[FieldmemError]:
    """The FieldmemError subclass whose ``kind`` the checker recorded for a failed target."""
    pending: list[type[FieldmemError]] = [FieldmemError]
    while pending:
        cls = pending.pop()
        if cls.kind == kind:
            return cls
        pending.extend(cls.__subclasses__())
    return FieldmemError


def _target(
    fn: Callable[..., Any],
    display: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    donate: Any,
    static: Any,
    expect: Expectation,
    max_peak: int | str | None,
    max_live_peak: int | str | None,
    new: Any = None,
) -> Target:
    """A target for ``fn`` called with the arguments in hand (options parsed as the CLI parses them)."""
    from fieldmem.request.target import Target, definition_of

    call_args, call_kwargs = tuple(args), dict(kwargs)
    return Target(
        spec=display,
        name=display,
        function=fn,
        # the (args, kwargs) form, so that a single tuple argument is never unpacked
        args_factory=lambda: (call_args, call_kwargs),
        args_origin=f"the arguments given to {display}",
        shapes=None,
        donate=DonateSpec.parse(donate, "donate="),
        static=StaticSpec.parse(static, "static="),
        expect=expect,
        max_peak=_size(max_peak, "max_peak="),
        max_live_peak=_size(max_live_peak, "max_live_peak="),
        definition=definition_of(fn),
        new=parse_new(new, "new=") or (),
    )


def check_function(
    fn: Callable[..., Any],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    name: str | None = None,
    expect: Expectation = "any",
    max_peak: int | str | None = None,
    max_live_peak: int | str | None = None,
    min_bytes: int | str = MIN_BYTES,
    run: bool = False,
    new: str | list[str] | tuple[str, ...] | None = None,
    fast_compile: bool = True,
    backend: str | None = None,
    **kwargs: Any,
) -> Report:
    """Compile ``fn(*args, **kwargs)`` with and without donation and return the Report.

    The same analysis as ``fieldmem check``, for a function object in hand.
    Nothing runs and, with ``jax.ShapeDtypeStruct`` arguments, nothing is
    allocated.

    Arguments:
        fn: the update function, a plain function or a ``jax.jit`` object.
        *args, **kwargs: its example arguments: arrays, ``jax.ShapeDtypeStruct``s,
            any pytree of them, and non-array values (made static). A keyword
            argument of ``fn`` named like one of the options below cannot be
            passed here: pass it positionally.
        donate: what the donated variant donates: ``"all"``, ``"none"``,
            argument numbers or names. Default: a jit object's own donation,
            else every array argument.
        static: extra static arguments (numbers or names).
        name: the name shown in the report (default ``module:qualname``).
        expect: ``"in-place"`` adds the ``expect-in-place`` check; ``"any"``
            only reports.
        max_peak: a budget on the donated ``footprint_bytes`` (``"64MiB"`` or bytes).
        max_live_peak: a budget on the donated ``live_peak_bytes``.
        min_bytes: smaller copies and outputs do not decide the verdict.
        run: also call both variants (in this process) and confirm every planned
            alias by buffer identity, as ``fieldmem check --run --no-isolate``.
        new: output paths meant to be new buffers, as ``--new`` (``"out[1]"``,
            ``"out.logits"``, a list or comma-separated; ``*`` matches any run
            of characters): never a break of in place.
        fast_compile: a static check compiles with XLA:CPU's code generation at
            -O0 (the same HLO, buffer assignment and findings, faster;
            ``generated_code_bytes`` is then unavailable); False: XLA's default,
            as ``--no-fast-compile``. With ``run`` the default is always used.
        backend: compile for this backend, as ``--backend`` takes one (``"cpu"``,
            ``"gpu"``, ``"tpu:v5e"``...; docs/backends.md). Default: jax's.

    Returns:
        A Report with one result; ``report.exit_code`` is 1 when a check failed.

    Raises:
        OptionError: a bad ``donate``, ``static``, ``expect`` or size.
        FieldmemError: the function does not trace or compile with these
            arguments (the subclass the checker recorded, e.g. ``CompileError``).

    Example::

        report = fieldmem.check_function(update, field, 1.0, donate="field")
        print(report.results[0].verdict.summary)
    """
    from fieldmem.engine.checker import check_targets

    parse_expect(expect, "expect=", required=True)
    if not callable(fn):
        raise OptionError(f"{type(fn).__name__} is not callable: pass the update function first, then its arguments")
    display = name or _function_name(fn)
    target = _target(fn, display, args, kwargs, donate, static, expect, max_peak, max_live_peak, new)
    report = check_targets([target], _options(min_bytes, run, fast_compile, backend))
    result = report.results[0]
    if result.status == "error":
        error = result.error
        raise _error_class(error.kind if error else "error")(
            f"{display}: {error.message if error else 'could not be checked'}"
        )
    return report


def check_chain(
    steps: Sequence[Callable[..., Any]],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    name: str | None = None,
    expect: Expectation = "any",
    max_peak: int | str | None = None,
    max_live_peak: int | str | None = None,
    min_bytes: int | str = MIN_BYTES,
    run: bool = False,
    step_args: Mapping[Any, Any] | None = None,
    fast_compile: bool = True,
    backend: str | None = None,
    **kwargs: Any,
) -> Report:
    """Check the update chain ``steps`` started on ``steps[0](*args, **kwargs)``, as ``fieldmem check mod:a,b,c``.

    Every step is compiled with and without donation on the previous step's
    outputs (a plain tuple is spread into positional arguments unless the
    next step takes one), and the whole chain once more as one jit.
    ``report.chains[0]`` holds the per-step verdicts, the hand-offs, the first
    break and steps vs fused; ``report.results`` each step's result and the
    fused one. Options are those of :func:`check_function`; ``donate`` and
    ``static`` name arguments of the first step (``"all"``/``"none"`` apply to
    every step); ``expect="in-place"`` fails the chain when a step breaks in place.
    ``step_args`` maps a step (the function, its name, or its number from 1)
    to the extras it takes after its state, in hand (``(g,)`` or ``((g,),
    {"lr": lr})``) or as a factory returning them: a per-step gradient or
    batch, never donated and left out of the hand-off checks (docs/chains.md).

    Raises:
        OptionError: fewer than two steps, or a bad option.

    Example::

        report = fieldmem.check_chain([create_field, update1, update2], x, expect="in-place")
        assert report.chains[0].in_place, report.chains[0].summary
    """
    from fieldmem.engine.checker import check_targets
    from fieldmem.request.registry import step_factories
    from fieldmem.request.target import ChainTarget, Step, definition_of

    steps = list(steps)
    if len(steps) < 2 or not all(callable(s) for s in steps):
        raise OptionError("check_chain needs a sequence of at least two functions, then the first one's arguments")
    parse_expect(expect, "expect=", required=True)
    names = [_function_name(s).rpartition(":")[2] for s in steps]
    display = name or f"{_function_name(steps[0]).rpartition(':')[0]}:{','.join(names)}"
    first = _target(steps[0], display, args, kwargs, donate, static, expect, max_peak, max_live_peak)
    extras = step_factories(tuple(steps), step_args, "check_chain") or (None,) * len(steps)
    chain = ChainTarget(
        first=first,
        steps=tuple(
            Step(name=n, function=s, definition=definition_of(s), extras=_in_hand(e))
            for n, s, e in zip(names, steps, extras)
        ),
    )
    return check_targets([chain], _options(min_bytes, run, fast_compile, backend))


def _options(min_bytes: int | str, run: bool, fast_compile: bool, backend: object) -> CheckOptions:
    """How the Python API checks: in the caller's process (``isolate=False``), with the caller's options."""
    return CheckOptions(
        min_bytes=parse_bytes(min_bytes, "min_bytes="),
        run=run,
        isolate=False,
        fast_compile=fast_compile,
        backend=_backend(backend),
    )


def _backend(backend: object) -> str | None:
    """``backend=`` as one backend name (None: jax's default).

    Raises:
        OptionError: not one name (several are checked one call each: the pytest plugin's ``backend=`` list).
    """
    if backend is None:
        return None
    names = parse_backends(backend, "backend=")
    if len(names) > 1:
        raise OptionError(f"backend={backend!r} names {len(names)} backends: check on one per call")
    return names[0]


def _in_hand(extras: Any) -> Callable[[], Any] | None:
    """A ``step_args`` value as a factory: a callable as it is, extras in hand returned as given."""
    if extras is None or callable(extras):
        return extras
    return lambda: extras


def assert_in_place(
    fn: Callable[..., Any],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    max_peak: int | str | None = None,
    max_live_peak: int | str | None = None,
    min_bytes: int | str = MIN_BYTES,
    name: str | None = None,
    run: bool = False,
    new: str | list[str] | tuple[str, ...] | None = None,
    fast_compile: bool = True,
    backend: str | None = None,
    **kwargs: Any,
) -> Report:
    """Assert that ``fn(*args, **kwargs)`` is in place with donation and within its budgets.

    Arguments are those of :func:`check_function` (``expect`` is
    ``"in-place"``). Works with or without pytest.

    Returns:
        The Report, for further assertions.

    Raises:
        NotInPlaceError: the donated variant is not in place, or its footprint
            exceeds ``max_peak``, or its live peak exceeds ``max_live_peak``;
            the message is the CLI's verdict with the findings and source lines.
        OptionError, FieldmemError: as :func:`check_function`.

    Example::

        fieldmem.assert_in_place(update, field, 1.0, donate="field", max_live_peak="64MiB")
    """
    __tracebackhide__ = True
    report = check_function(
        fn,
        *args,
        donate=donate,
        static=static,
        name=name,
        expect="in-place",
        max_peak=max_peak,
        max_live_peak=max_live_peak,
        min_bytes=min_bytes,
        run=run,
        new=new,
        fast_compile=fast_compile,
        backend=backend,
        **kwargs,
    )
    if report.exit_code != 0:
        raise NotInPlaceError(report)
    return report


def combine_reports(reports: Sequence[Report], min_bytes: int) -> Report:
    """One Report holding the results of ``reports`` (the checks of one pytest session).

    The environment (versions, backend, devices) is the first report's: the
    reports come from one process. With no report, it is read from jax.
    """
    if reports:
        first = reports[0]
        environment: dict[str, Any] = dict(
            jax_version=first.jax_version,
            jaxlib_version=first.jaxlib_version,
            backend=first.backend,
            platform_version=first.platform_version,
            devices=first.devices,
        )
    else:
        from fieldmem.driver import environment as read_environment

        env = read_environment()
        environment = dict(
            jax_version=env.jax_version,
            jaxlib_version=env.jaxlib_version,
            backend=env.backend,
            platform_version=env.platform_version,
            devices=tuple(DeviceInfo(id=d["id"], platform=d["platform"], kind=d["kind"]) for d in env.devices),
        )
    return Report(
        fieldmem_version=__version__,
        results=tuple(result for report in reports for result in report.results),
        chains=tuple(chain for report in reports for chain in report.chains),
        min_bytes=min_bytes,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        **environment,
    )
