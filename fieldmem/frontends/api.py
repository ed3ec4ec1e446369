"""Check a function object from Python: ``check_function`` and ``assert_in_place``.

``fieldmem check`` starts from a target string; tests and notebooks already
hold the function and its arguments. This module wraps them in a
:class:`~fieldmem.request.target.Target` and runs the same checker
(:func:`fieldmem.parent.checker.check_targets`), so a verdict here is the verdict the
CLI gives. It computes nothing of its own.

It never prints. jax is imported only when a check runs (through the checker),
so ``import fieldmem`` stays free of jax.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fieldmem.model import __version__
from fieldmem.model.environment import DeviceInfo
from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.model.escaping import defused, visible_strings
from fieldmem.model.report import Report
from fieldmem.model.units import parse_bytes
from fieldmem.model.versions import check_supported
from fieldmem.model.word_sets import Expectation
from fieldmem.request.option_table import api_options
from fieldmem.request.options import (
    MIN_BYTES,
    CheckOptions,
    footprint_budget,
    parse_backends,
    parse_expect,
    parse_jax_versions,
)

__all__ = [
    "NotInPlaceError",
    "assert_in_place",
    "check_chain",
    "check_function",
    "combine_reports",
    "failure_message",
    "raise_for_error",
    "worker_options",
]


class NotInPlaceError(AssertionError):
    """An update is not in place with donation, or exceeds a memory budget.

    An ``AssertionError``, so pytest reports it as a test failure. The message
    is the CLI's table for this one target (verdict, findings with source
    lines, checks); ``report`` holds the whole :class:`~fieldmem.model.report.Report`.
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
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.render import RenderOptions, get_renderer

    report = visible_strings(report)  # names and messages as every output shows user text (a CI log prints it)
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
    return defused("\n".join([*lines, table.rstrip()]))


def _error_class(kind: str) -> type[FieldmemError]:
    """The FieldmemError subclass whose ``kind`` the checker recorded for a failed target."""
    pending: list[type[FieldmemError]] = [FieldmemError]
    while pending:
        cls = pending.pop()
        if cls.kind == kind:
            return cls
        pending.extend(cls.__subclasses__())
    return FieldmemError


def check_function(
    fn: Callable[..., Any],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    name: str | None = None,
    expect: Expectation = "any",
    max_footprint: int | str | None = None,
    max_live_peak: int | str | None = None,
    max_peak: int | str | None = None,
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
        max_footprint: a budget on the donated ``footprint_bytes`` (``"64MiB"`` or bytes): what the
            program holds at once. ``max_peak`` is its older name.
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
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.parent.checker import check_targets
    from fieldmem.request.in_hand import in_hand

    parse_expect(expect, "expect=", required=True)
    footprint_budget(max_footprint, max_peak)  # one of the two names, not both
    kwargs, table = _table_keywords(kwargs)
    settings = dict(
        donate=donate, static=static, name=name, expect=expect, max_footprint=max_footprint, max_peak=max_peak
    )
    target = in_hand("function", fn, args, kwargs, **settings, max_live_peak=max_live_peak, new=new)
    display = target.name
    report = check_targets([target], _options(min_bytes, run, fast_compile, backend, table))
    raise_for_error(report, display)
    return report


def raise_for_error(report: Report, display: str) -> None:
    """Raise the error of a check of one function that could not be checked (as the checker recorded it).

    Raises:
        FieldmemError: the subclass of the recorded kind (``CompileError``, a worker's ``crash``...).
    """
    result = report.results[0]
    if result.status == "error":
        error = result.error
        raise _error_class(error.kind if error else "error")(
            f"{display}: {error.message if error else 'could not be checked'}"
        )


def worker_options(min_bytes: int | str, backend: object) -> CheckOptions:
    """How the pytest plugin checks a function in hand in its supervised worker: as the API does, with
    fast compiles, on ``backend``."""
    return _options(min_bytes, False, True, backend)


def check_releases(
    *specs: str,
    jax: Sequence[str],
    backend: str | None = None,
    min_bytes: int | str = MIN_BYTES,
) -> tuple[Report, ...]:
    """``fieldmem check SPEC... --jax A,B`` from Python: one Report per jax release in ``jax`` (and per backend
    of ``backend``, a name or ``"cpu,tpu:v5e"``), in that order, each checked by workers under a cached
    environment of that release (:mod:`fieldmem.parent.envs`, made on first use). Unlike :func:`check`,
    nothing runs in this process: a release other than this environment's needs a Python of its own.
    ``fieldmem.gate.compare.compare_reports`` puts the reports side by side.

    Raises:
        OptionError: a release outside the supported range, a bad backend or size.
        EnvError: an environment that cannot be made (the release is not on the index, the index is out of
            reach).
    """
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.parent.interpreters import in_use, worker_interpreters
    from fieldmem.parent.isolate import Unit, check_reports
    from fieldmem.request.target import TargetOptions

    versions = parse_jax_versions(list(jax), "jax=")
    for version in versions:
        check_supported(version)
    backends: list[str | None] = list(parse_backends(backend, "backend=")) if backend is not None else [None]
    options = CheckOptions(min_bytes=parse_bytes(min_bytes) if isinstance(min_bytes, str) else min_bytes)
    units = [Unit(spec, TargetOptions()) for spec in specs]
    names = [b for b in backends if b is not None] or None
    reports: tuple[Report, ...] = ()
    for interpreter in worker_interpreters(versions, None, names):
        with in_use(interpreter):  # its environment is not removed while its workers run
            reports += check_reports(
                units, backends, options, check_backends=backend is not None, interpreter=interpreter
            )
    return reports


def check_chain(
    steps: Sequence[Callable[..., Any]],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    name: str | None = None,
    expect: Expectation = "any",
    max_footprint: int | str | None = None,
    max_live_peak: int | str | None = None,
    max_peak: int | str | None = None,
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
    # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
    from fieldmem.parent.checker import check_targets
    from fieldmem.request.in_hand import in_hand

    parse_expect(expect, "expect=", required=True)
    footprint_budget(max_footprint, max_peak)  # one of the two names, not both
    settings = dict(
        donate=donate, static=static, name=name, expect=expect, max_footprint=max_footprint, max_peak=max_peak
    )
    kwargs, table = _table_keywords(kwargs)
    chain = in_hand("chain", steps, args, kwargs, **settings, max_live_peak=max_live_peak, step_args=step_args)
    return check_targets([chain], _options(min_bytes, run, fast_compile, backend, table))


def _options(
    min_bytes: int | str, run: bool, fast_compile: bool, backend: object, table: Mapping[str, Any] | None = None
) -> CheckOptions:
    """How the Python API checks: in the caller's process (``isolate=False``), with the caller's options;
    ``table``: the option table's keywords the API does not name itself (:func:`_table_keywords`)."""
    return CheckOptions(
        min_bytes=parse_bytes(min_bytes, "min_bytes="),
        run=run,
        isolate=False,
        fast_compile=fast_compile,
        backend=_backend(backend),
        **(table or {}),
    )


def _table_keywords(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` without the keywords of the option table (:mod:`fieldmem.request.option_table`) that the
    API's functions do not name themselves, and those keywords' values by option name: each sets the
    :class:`~fieldmem.request.options.CheckOptions` field of its name (none today: every API keyword of the
    table is a parameter of :func:`check_function`; an option added to the table is taken here).

    Raises:
        OptionError: an option that no check reads (``CheckOptions`` has no field of its name).
    """
    taken = {row.api: row.name for row in api_options() if row.api in kwargs and row.api not in _NAMED}
    if not taken:
        return kwargs, {}
    held = {f.name for f in dataclasses.fields(CheckOptions)}
    for keyword, name in taken.items():
        if name not in held:
            raise OptionError(
                f"{keyword}= is an option of the table that no check reads yet (CheckOptions has no {name})"
            )
    rest = {key: value for key, value in kwargs.items() if key not in taken}
    return rest, {name: kwargs[keyword] for keyword, name in taken.items()}


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


def assert_in_place(
    fn: Callable[..., Any],
    *args: Any,
    donate: str | int | tuple | list | None = None,
    static: str | int | tuple | list | None = None,
    max_footprint: int | str | None = None,
    max_live_peak: int | str | None = None,
    max_peak: int | str | None = None,
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
            exceeds ``max_footprint``, or its live peak exceeds ``max_live_peak``;
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
        max_footprint=max_footprint,
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
        # here, not at the top: at the top, these make importing the API 0.86 s, not 0.12 s (measured 2026-12-06)
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


#: the keywords the API's checks name themselves (an option of the table beyond them: :func:`_table_keywords`)
_NAMED = frozenset(inspect.signature(check_function).parameters) | frozenset(inspect.signature(check_chain).parameters)
