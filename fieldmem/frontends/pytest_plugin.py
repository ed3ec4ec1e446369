"""The pytest plugin: assert in tests that an update is in place and within budget.

Registered through the ``pytest11`` entry point, so it loads in every pytest
session of every project that has fieldmem installed, fieldmem's own suite
included. At load it imports nothing heavy (no jax) and does nothing but
register its options and its ``fieldmem`` marker; the work happens only when
a test calls the ``fieldmem_check`` fixture, through
:func:`fieldmem.frontends.api.check_function` (the same checker as ``fieldmem check``).

Where a limit comes from, first match wins: the fixture call's keyword, the
closest ``@pytest.mark.fieldmem(...)``, the command-line option, its ini twin,
``[tool.fieldmem]`` (the keys that make sense for a check in hand: budgets,
``min-bytes``, ``backends``, ``tolerance``, ``baseline``), the default. Every
value is parsed once (options at configure time, a marker when its test is set
up) and a bad one is a usage error naming it.

Each check is also recorded under the name ``fieldmem check`` gives the same
function in a baseline (:func:`fieldmem.request.target.in_hand_key`), so the
two share one baseline file. When the session ends the checks are gated
against ``--fieldmem-baseline`` (every regression collected, listed once in
the terminal summary, and with ``--fieldmem-compare-fail`` failing the run)
and saved with ``--fieldmem-save-baseline``, by :mod:`fieldmem.gate.baseline`.
Under pytest-xdist each worker hands its checks to the controller
(``workeroutput``, read in ``pytest_testnodedown``), which alone writes the
report and the baseline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.model.units import parse_bytes
from fieldmem.request.options import MIN_BYTES, footprint_budget, parse_backends, parse_new
from fieldmem.request.tolerance import Tolerances

if TYPE_CHECKING:
    from fieldmem.model.report import Report

__all__ = ["FieldmemCheck", "Limits"]

MARKER = "fieldmem"
FIXTURE = "fieldmem_check"
_MARKER_HELP = (
    "fieldmem(in_place=True, max_footprint=None, max_live_peak=None, min_bytes=None, donate=None, static=None, "
    "new=None, backend=None): "
    "limits for the fieldmem_check fixture in this test (sizes like '64MiB')"
)


@dataclass(frozen=True)
class _Option:
    """One setting: its command-line flag and its ini twin share the help text."""

    dest: str
    flag: str
    ini: str
    metavar: str
    help: str
    older: tuple[str, str] | None = None  # an older name, (flag, ini), still taken


_SIZE_OPTIONS = (
    _Option(
        "max_peak",
        "--fieldmem-max-footprint",
        "fieldmem_max_footprint",
        "SIZE",
        "budget for the donated variant's footprint (footprint_bytes: what the program holds at once) in every "
        "fieldmem_check, e.g. 64MiB (--fieldmem-max-peak, ini fieldmem_max_peak: its older name)",
        older=("--fieldmem-max-peak", "fieldmem_max_peak"),
    ),
    _Option(
        "max_live_peak",
        "--fieldmem-max-live-peak",
        "fieldmem_max_live_peak",
        "SIZE",
        "budget for the donated variant's live_peak_bytes in every fieldmem_check, e.g. 64MiB",
    ),
    _Option(
        "min_bytes",
        "--fieldmem-min-bytes",
        "fieldmem_min_bytes",
        "SIZE",
        "copies and outputs smaller than this do not decide the verdict (default 1KiB)",
    ),
)
_ISOLATE_OPTION = _Option(
    "isolate",
    "--fieldmem-isolate",
    "fieldmem_isolate",
    "yes|no",
    "trace and compile each fieldmem_check in fieldmem's supervised worker process, where a crash, os._exit or "
    "hang fails that test only (yes, the default), or in pytest's own process (no)",
)
_TIMEOUT_OPTION = _Option(
    "timeout",
    "--fieldmem-timeout",
    "fieldmem_timeout",
    "SECONDS",
    f"a fieldmem_check taking longer fails its test, and its worker process is killed (default {600:g}; 0: no limit)",
)
DEFAULT_TIMEOUT = 600.0
_JAX_OPTION = _Option(
    "jax",
    "--fieldmem-jax",
    "fieldmem_jax",
    "VERSION",
    "check under this jax release, in a cached environment of its own (fieldmem envs; made on first use), "
    "rather than the jax installed here: one release per session",
)
_REPORT_OPTION = _Option(
    "report",
    "--fieldmem-report",
    "fieldmem_report",
    "PATH",
    "write the JSON report (fieldmem.report/2) of every fieldmem_check in the session to PATH",
)
_BASELINE_OPTION = _Option(
    "baseline",
    "--fieldmem-baseline",
    "fieldmem_baseline",
    "PATH",
    "compare every fieldmem_check with this baseline (fieldmem check --save-baseline or --fieldmem-save-baseline "
    "writes it) and list each regression at the end (default with --fieldmem-compare-fail: the baseline of "
    "[tool.fieldmem])",
)
_TOLERANCE_OPTION = _Option(
    "tolerance",
    "--fieldmem-tolerance",
    "fieldmem_tolerance",
    "TOLERANCE",
    "growth the baseline comparison allows, as fieldmem check --tolerance: e.g. 2% or peak:5%,temp:1MiB "
    "(default: [tool.fieldmem] tolerance, else exact)",
)
_COMPARE_FAIL_HELP = (
    "fail the session when a fieldmem_check regressed against the baseline (every regression listed once, "
    "as fieldmem check --baseline fails)"
)
_SAVE_HELP = (
    "save every fieldmem_check of the session into this baseline (atomically, under its lock; entries of other "
    "targets and backends are kept), when every test passed and no check regressed"
)


@dataclass(frozen=True)
class Limits:
    """What a fieldmem_check asserts: in place or not, the budgets, the size threshold."""

    in_place: bool = True
    max_peak: int | None = None
    max_live_peak: int | None = None
    min_bytes: int = MIN_BYTES
    donate: Any = None
    static: Any = None
    new: tuple[str, ...] | None = None  # output paths declared new (single functions; not chains)
    backend: tuple[str, ...] | None = None  # check on each of these backends (None: jax's default)


# max_footprint is the budget Limits keeps as max_peak (its older name, still taken, not listed)
_MARKER_KEYS = tuple("max_footprint" if f.name == "max_peak" else f.name for f in dataclasses.fields(Limits))
_MARKER_TAKES = (*_MARKER_KEYS, "max_peak")


@dataclass
class _Session:
    """The parsed options and every report checked in this session."""

    defaults: Limits
    report_path: Path | None
    reports: list[Report] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)
    written: str | None = None
    write_error: str | None = None
    isolate: bool = True
    timeout: float | None = DEFAULT_TIMEOUT
    # fieldmem.parent.isolate.CallSession by (interpreter, environment), each started by its first check
    workers: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = field(default_factory=dict)
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # the environments in use
    jax: str | None = None  # --fieldmem-jax: the workers run under a cached environment of this release
    # (test node id, the check's report with every result named by its baseline key)
    keyed: list[tuple[str, Report]] = field(default_factory=list)
    baseline: Path | None = None  # compared with at the end
    compare_fail: bool = False  # a regression fails the session
    save_to: Path | None = None  # --fieldmem-save-baseline
    tolerances: Tolerances = Tolerances()
    root: Path | None = None  # baseline names are relative to it: the [tool.fieldmem] folder; None: the baseline's
    from_workers: bool = False  # pytest-xdist: the checks came from the workers, in the order they ended
    summary: list[str] = field(default_factory=list)  # what the baseline gate and save say, for the summary
    gate_failed: bool = False

    def check(
        self,
        kind: str,
        subject: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        settings: dict[str, Any],
        min_bytes: int,
        backend: str | None,
    ) -> Report:
        """One check of a function (``kind`` ``"function"``) or chain in hand: in the supervised worker when
        it can be sent there (a function that could not be checked, a worker that died or hung, is an error
        result of the report), else (and with ``--fieldmem-isolate no``) in this process.

        Raises:
            FieldmemError: in this process, the function could not be checked (as check_function).
        """
        from fieldmem.frontends.api import check_chain, check_function

        if self.isolate:
            from fieldmem.driver.sendable import NotSendable, dumps, tracing_config

            try:  # with jax's settings as the test has them (jax_enable_x64...): the program the test builds
                call = dumps((tracing_config(), dumps((kind, subject, args, kwargs, settings))))
            except NotSendable as exc:
                _warn_in_process(kind, subject, settings, str(exc))
            else:
                return self._check_in_worker(kind, subject, call, settings, min_bytes, backend)
        with _forks_end_in_the_child():
            if kind == "function":
                return check_function(subject, *args, **settings, min_bytes=min_bytes, backend=backend, **kwargs)
            return check_chain(subject, *args, **settings, min_bytes=min_bytes, backend=backend, **kwargs)

    def _check_in_worker(
        self, kind: str, subject: Any, call: bytes, settings: dict[str, Any], min_bytes: int, backend: str | None
    ) -> Report:
        from fieldmem.frontends.api import worker_options
        from fieldmem.parent.isolate import CallSession
        from fieldmem.request.target import in_hand_name

        interpreter, environ = _worker_for(backend, self.jax)
        key = (interpreter.label if interpreter is not None else "", tuple(sorted(environ.items())))
        worker = self.workers.get(key)
        if worker is None:
            from fieldmem.parent.interpreters import in_use

            self.held.enter_context(in_use(interpreter))  # not removed while the session's checks run
            worker = self.workers[key] = CallSession(self.timeout, interpreter, environ)
        label = in_hand_name(kind, subject, settings.get("name"))
        report: Report = worker.check(call, label, worker_options(min_bytes, backend))
        return report

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
        self.held.close()

    def record(self, report: Report, nodeid: str, backend: str | None = None, display: str = "", key: str = "") -> None:
        """Keep ``report`` for --fieldmem-report, its result keyed by the test's node id (and the backend,
        when the test checks on several); and for the baseline, its results named by ``key`` (what
        ``fieldmem check`` names the function checked as ``display``) instead."""
        result = report.results[0]
        base = f"{nodeid}::{result.name}" + (f"[{backend}]" if backend is not None else "")
        target = base
        n = 2
        while target in self.targets:  # one test may check the same function twice
            target = f"{base}#{n}"
            n += 1
        self.targets.add(target)
        self.reports.append(dataclasses.replace(report, results=(dataclasses.replace(result, target=target),)))
        if display and key:
            renamed = tuple(
                dataclasses.replace(
                    r, name=key + r.name[len(display) :] if r.name.startswith(display) else r.name, target=key
                )
                for r in report.results
            )
            self.keyed.append((nodeid, dataclasses.replace(report, results=renamed)))

    def handed_over(self) -> str:
        """This worker's checks as the controller reads them back (:meth:`take_over`)."""
        return json.dumps(
            {
                "reports": [r.to_dict() for r in self.reports],
                "keyed": [[nodeid, r.to_dict()] for nodeid, r in self.keyed],
            }
        )

    def take_over(self, text: str) -> None:
        """The checks a pytest-xdist worker handed over (:meth:`handed_over`)."""
        from fieldmem.model.report import Report

        data = json.loads(text)
        self.reports.extend(Report.from_dict(r) for r in data["reports"])
        self.keyed.extend((str(nodeid), Report.from_dict(r)) for nodeid, r in data["keyed"])
        self.from_workers = True


# the process that checks in pytest's own process now (--fieldmem-isolate no), while it traces and compiles
_CHECKING: list[int] = []
_FORK_HOOKED: list[bool] = []


def _after_fork_in_child() -> None:
    """A process forked while pytest's own process traced or compiled a check (the traced function called
    os.fork): jax does not run in a forked copy (its threads stay behind), so the copy would hang for ever
    holding pytest's output, or return into pytest and run the session a second time. It ends now."""
    if _CHECKING and _CHECKING[-1] != os.getpid():
        message = b"fieldmem: a process forked while fieldmem checked a function in pytest's process has ended\n"
        try:
            os.write(2, message)
        finally:
            os._exit(1)


@contextlib.contextmanager
def _forks_end_in_the_child() -> Iterator[None]:
    """For the block (a check in pytest's own process): a process forked from it ends at once."""
    if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _FORK_HOOKED.append(True)
    _CHECKING.append(os.getpid())
    try:
        yield
    finally:
        _CHECKING.pop()


_SESSION = pytest.StashKey[_Session]()
_UNSET: Any = object()


class FieldmemWarning(UserWarning):
    """A fieldmem_check that could not be checked the way the session asked (in the supervised worker)."""


def _worker_for(backend: str | None, jax: str | None) -> tuple[Any, dict[str, str]]:
    """The interpreter (None: this Python) and the environment a worker checking on ``backend`` needs, as
    ``fieldmem check`` gives its own: a deviceless backend's variables (``JAX_PLATFORMS=cpu``...), and where
    its compiler is not installed here, a cached environment of this jax that has it, made on first use
    (saying so on stderr, before anything a library prints); ``jax``: ``--fieldmem-jax``'s release."""
    from fieldmem.request.backends import deviceless_environment, extra_installed, parse_backend

    named = parse_backend(backend) if backend is not None else None
    environ = deviceless_environment([named] if named is not None else None)
    if jax is not None:
        from fieldmem.parent.envs import borrowed_folder
        from fieldmem.parent.interpreters import worker_interpreters

        (interpreter,) = worker_interpreters([jax], None, [backend] if backend else None, _say)
        assert interpreter is not None
        # the test modules the worker imports import pytest: its own, where that environment lacks one
        borrowed = borrowed_folder(("pytest",))
        if borrowed is not None:
            interpreter = dataclasses.replace(interpreter, fallback_path=(borrowed,))
        return interpreter, environ
    if named is not None and not extra_installed(named):
        from importlib import metadata

        from fieldmem.parent.interpreters import compilers_interpreter

        _say(f"{named.name}: its compiler is not installed here; checking in a cached environment that has it")
        return compilers_interpreter([named.platform], metadata.version("jax"), _say), environ
    return None, environ


def _say(line: str) -> None:
    """What fieldmem is doing before a check (making an environment), on the terminal, past pytest's capture."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"fieldmem: {line}\n")
    stream.flush()


def _warn_in_process(kind: str, subject: Any, settings: dict[str, Any], why: str) -> None:
    import warnings

    from fieldmem.request.target import in_hand_name

    name = in_hand_name(kind, subject, settings.get("name"))
    warnings.warn(
        FieldmemWarning(
            f"fieldmem: {name} was checked in pytest's own process, not the supervised worker: {why} "
            "(define it at module level to have it supervised)"
        ),
        stacklevel=4,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fieldmem", "fieldmem: in-place and memory checks of jitted JAX updates")
    for option in (
        *_SIZE_OPTIONS,
        _ISOLATE_OPTION,
        _TIMEOUT_OPTION,
        _JAX_OPTION,
        _REPORT_OPTION,
        _BASELINE_OPTION,
        _TOLERANCE_OPTION,
    ):
        group.addoption(
            # argparse formats help with %: a tolerance's 2% is written 2%%
            option.flag,
            *((option.older[0],) if option.older else ()),
            dest=f"fieldmem_{option.dest}",
            metavar=option.metavar,
            default=None,
            help=option.help.replace("%", "%%"),
        )
        parser.addini(option.ini, f"{option.help} (ini twin of {option.flag})", type="string", default=None)
        if option.older:
            parser.addini(option.older[1], f"the older name of {option.ini}", type="string", default=None)
    group.addoption(
        "--fieldmem-compare-fail",
        dest="fieldmem_compare_fail",
        action="store_true",
        default=None,
        help=_COMPARE_FAIL_HELP,
    )
    parser.addini(
        "fieldmem_compare_fail",
        f"{_COMPARE_FAIL_HELP} (ini twin of --fieldmem-compare-fail)",
        type="bool",
        default=False,
    )
    # no ini twin: a baseline saved by every run would never gate anything
    group.addoption(
        "--fieldmem-save-baseline", dest="fieldmem_save_baseline", metavar="PATH", default=None, help=_SAVE_HELP
    )


def _setting(config: pytest.Config, option: _Option) -> tuple[str | None, str]:
    """The value of ``option`` from the command line, else its ini twin; and how to name it."""
    value = config.getoption(f"fieldmem_{option.dest}")
    if value is not None:
        return value, option.flag
    for ini in (option.ini, *((option.older[1],) if option.older else ())):
        value = config.getini(ini)
        if isinstance(value, str) and value.strip():
            return value.strip(), f"ini {ini}"
    return None, f"ini {option.ini}"


def _path(config: pytest.Config, value: str, label: str, flag: str) -> Path:
    """A path option's file: a command-line path is relative to where pytest runs, an ini one to the ini file."""
    base = (
        config.invocation_params.dir
        if label == flag
        else (config.inipath.parent if config.inipath is not None else config.rootpath)
    )
    return base / value


def _parse_session(config: pytest.Config) -> _Session:
    from fieldmem.request.config import load_config

    project = load_config(start=config.invocation_params.dir)  # [tool.fieldmem], as fieldmem check finds it
    sizes: dict[str, Any] = {}  # int | None each
    from_project = {
        "max_peak": project.options.max_peak,
        "max_live_peak": project.options.max_live_peak,
        "min_bytes": project.min_bytes,
    }
    for option in _SIZE_OPTIONS:
        value, label = _setting(config, option)
        sizes[option.dest] = parse_bytes(value, label) if value is not None else from_project[option.dest]
    min_bytes = sizes.pop("min_bytes")
    defaults = Limits(min_bytes=MIN_BYTES if min_bytes is None else min_bytes, backend=project.backends, **sizes)
    value, label = _setting(config, _REPORT_OPTION)
    report_path = None
    if value is not None:
        report_path = _path(config, value, label, _REPORT_OPTION.flag)
        if report_path.is_dir():
            example = str(Path(value) / "fieldmem.json")
            raise OptionError(f"{label} {value!r} is a folder: name a file, e.g. {example!r}")
        if not report_path.parent.is_dir():
            raise OptionError(f"{label} {value!r}: the folder {str(report_path.parent)!r} does not exist")
        from fieldmem.model.files import not_a_file

        kind = not_a_file(report_path)
        if kind is not None:
            raise OptionError(
                f"{label} {value!r} is not a regular file ({kind}), which fieldmem never replaces: name a file"
            )
    value, label = _setting(config, _ISOLATE_OPTION)
    isolate = True
    if value is not None:
        if value.lower() not in ("yes", "no", "true", "false", "1", "0"):
            raise OptionError(f"{label} {value!r} is not understood: use yes or no")
        isolate = value.lower() in ("yes", "true", "1")
    value, label = _setting(config, _TIMEOUT_OPTION)
    timeout: float | None = DEFAULT_TIMEOUT
    if value is not None:
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if not 0 <= timeout < float("inf"):
            raise OptionError(f"{label} {value!r} is not understood: give seconds, e.g. 600 (0: no limit)")
        timeout = timeout or None
    value, label = _setting(config, _JAX_OPTION)
    jax_release: str | None = None
    if value is not None:
        from fieldmem.model.versions import check_supported
        from fieldmem.request.options import parse_jax_versions

        releases = parse_jax_versions(value, label)
        if len(releases) != 1:
            raise OptionError(f"{label} {value!r}: one release per session (run pytest once per release)")
        jax_release = releases[0]
        check_supported(jax_release)
        if not isolate:
            raise OptionError(f"{label} checks in a worker under that release: drop --fieldmem-isolate no")
    session = _Session(defaults=defaults, report_path=report_path, isolate=isolate, timeout=timeout, jax=jax_release)
    _parse_baseline(config, project, session)
    _refuse_report_on_baseline(session, label=_setting(config, _REPORT_OPTION)[1])
    return session


def _refuse_report_on_baseline(session: _Session, label: str) -> None:
    """The report must not be the baseline compared with or saved to: written first, it would replace the
    baseline before the gate read it (as ``fieldmem check`` refuses ``-o b.json --baseline b.json``).

    Raises:
        OptionError: ``--fieldmem-report`` names the file of ``--fieldmem-baseline`` or ``--fieldmem-save-baseline``.
    """
    if session.report_path is None:
        return
    from fieldmem.model.files import same_file

    for path, option in ((session.baseline, _BASELINE_OPTION.flag), (session.save_to, "--fieldmem-save-baseline")):
        if path is not None and same_file(session.report_path, path):
            raise OptionError(
                f"{label} {str(session.report_path)!r} and {option} {str(path)!r} name the same file: the report "
                "would replace the baseline; give the report its own file"
            )


def _parse_baseline(config: pytest.Config, project: Any, session: _Session) -> None:
    """The baseline options into ``session``: what is compared with, saved to, and how strictly.

    Raises:
        OptionError: a tolerance fieldmem cannot read, a baseline to compare with that does not exist (and is
            not the one this session saves), --fieldmem-compare-fail with no baseline, a path that is a folder.
    """
    value, label = _setting(config, _TOLERANCE_OPTION)
    session.tolerances = Tolerances.parse(value, label) if value is not None else project.tolerance or Tolerances()
    session.compare_fail = bool(config.getoption("fieldmem_compare_fail") or config.getini("fieldmem_compare_fail"))
    session.root = project.path.resolve().parent if project.path is not None else None
    saved = config.getoption("fieldmem_save_baseline")
    if saved is not None:
        session.save_to = config.invocation_params.dir / saved
        if session.save_to.is_dir():
            raise OptionError(
                f"--fieldmem-save-baseline {saved!r} is a folder: name a file, e.g. 'fieldmem-baseline.json'"
            )
        from fieldmem.model.files import not_a_file

        kind = not_a_file(session.save_to, through_link=True)
        if kind is not None:
            raise OptionError(
                f"--fieldmem-save-baseline {saved!r} is not a regular file ({kind}), which fieldmem never replaces: "
                "name a baseline file"
            )
        if not session.save_to.parent.is_dir():
            raise OptionError(
                f"--fieldmem-save-baseline {saved!r}: the folder {str(session.save_to.parent)!r} does not exist"
            )
    value, label = _setting(config, _BASELINE_OPTION)
    if value is not None:
        baseline: Path | None = _path(config, value, label, _BASELINE_OPTION.flag)
    elif session.compare_fail and project.baseline is not None:
        baseline, value, label = Path(project.baseline).absolute(), project.baseline, "[tool.fieldmem] baseline"
    elif session.compare_fail:
        raise OptionError(
            "--fieldmem-compare-fail needs a baseline: give --fieldmem-baseline PATH "
            '(or baseline = "fieldmem-baseline.json" in [tool.fieldmem])'
        )
    else:
        return
    assert baseline is not None
    if baseline.is_dir():
        raise OptionError(f"{label} {value!r} is a folder: name a baseline file")
    if not baseline.exists():
        if session.save_to is not None and baseline.absolute() == session.save_to.absolute():
            return  # this session creates it
        raise OptionError(
            f"{label} {value!r} does not exist: save one with --fieldmem-save-baseline {value} "
            f"(or fieldmem check ... --save-baseline {value})"
        )
    session.baseline = baseline


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    try:
        config.stash[_SESSION] = _parse_session(config)
    except FieldmemError as exc:
        raise pytest.UsageError(f"fieldmem: error: {exc.message}") from None


def _marker_limits(node: pytest.Item, defaults: Limits) -> Limits:
    """``defaults`` overridden by every fieldmem marker on ``node``, the closest last."""
    limits = defaults
    for marker in reversed(list(node.iter_markers(MARKER))):
        if marker.args:
            raise OptionError(
                f"@pytest.mark.fieldmem takes keywords only ({', '.join(_MARKER_KEYS)}), got {marker.args!r}"
            )
        unknown = sorted(set(marker.kwargs) - set(_MARKER_TAKES))
        if unknown:
            raise OptionError(f"@pytest.mark.fieldmem has no {unknown[0]!r}: use {', '.join(_MARKER_KEYS)}")
        limits = _override(limits, marker.kwargs, "@pytest.mark.fieldmem {}=")
    return limits


def _override(limits: Limits, values: Mapping[str, Any], label: str) -> Limits:
    """``limits`` with ``values`` parsed in (a size may be None: no budget); ``max_footprint`` is the budget
    ``Limits`` keeps as ``max_peak`` (its older name: one of the two)."""
    values = dict(values)
    named = "max_footprint" if "max_footprint" in values else "max_peak"  # as the user named the budget
    if "max_footprint" in values:
        if "max_peak" in values:
            footprint_budget(values["max_footprint"], values["max_peak"], label)
            if values["max_footprint"] is None or values["max_peak"] is None:  # one of them drops the budget
                raise OptionError(
                    f"{label.format('max_footprint')} and {label.format('max_peak')} are one budget: give one"
                )
        values["max_peak"] = values.pop("max_footprint")
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key in ("max_peak", "max_live_peak"):
            shown = named if key == "max_peak" else key
            changes[key] = None if value is None else parse_bytes(value, label.format(shown))
        elif key == "min_bytes":
            changes[key] = MIN_BYTES if value is None else parse_bytes(value, label.format(key))
        elif key == "new":
            changes[key] = parse_new(value, label.format(key))
        elif key == "backend":
            changes[key] = None if value is None else parse_backends(value, label.format(key))
        elif key == "in_place":
            if not isinstance(value, bool):
                raise OptionError(f"{label.format(key)}{value!r} is not understood: use True or False")
            changes[key] = value
        else:
            changes[key] = value
    return dataclasses.replace(limits, **changes)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``fieldmem`` itself must use the fixture the marker configures."""
    if any(m.name == MARKER for m in getattr(item, "own_markers", ())) and FIXTURE not in getattr(
        item, "fixturenames", ()
    ):
        pytest.fail(
            f"fieldmem: error: {item.name} is marked @pytest.mark.fieldmem but does not use the {FIXTURE} "
            f"fixture, so nothing is checked: add {FIXTURE} to its arguments and call {FIXTURE}(update, *args)",
            pytrace=False,
        )


class FieldmemCheck:
    """The ``fieldmem_check`` fixture: call it with an update function and its arguments."""

    def __init__(self, limits: Limits, session: _Session, nodeid: str) -> None:
        self.limits = limits
        self._session = session
        self._nodeid = nodeid

    def __call__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        in_place: bool = _UNSET,
        max_footprint: int | str | None = _UNSET,
        max_peak: int | str | None = _UNSET,
        max_live_peak: int | str | None = _UNSET,
        min_bytes: int | str = _UNSET,
        donate: Any = _UNSET,
        static: Any = _UNSET,
        name: str | None = None,
        new: Any = _UNSET,
        backend: str | list[str] | tuple[str, ...] | None = _UNSET,
        **kwargs: Any,
    ) -> Report:
        """Check ``fn(*args, **kwargs)``; fail the test when it is not in place or over budget.

        Keywords left out take the marker's, the command line's, the ini's or
        the default value; ``max_footprint=None`` drops a budget set elsewhere
        (``max_peak`` is its older name).
        ``in_place=False`` checks the budgets only. ``new`` names outputs
        meant to be new buffers (``"out[1]"``, ``"out.logits"``, as ``--new``):
        never a break of in place. ``backend`` checks on a backend as
        ``--backend`` names it (``"tpu:v5e"``), or on each of several
        (``["cpu", "tpu:v5e", "gpu:h100"]`` or ``"cpu,tpu:v5e"``): the test fails
        when the check fails on any of them. The remaining keyword arguments go to ``fn``.

        Returns:
            The Report (one result), for further assertions; with several
            backends, the Report of the last one (each is recorded for
            ``--fieldmem-report``).

        Raises:
            NotInPlaceError: a check failed; the message is the CLI's verdict.
        """
        __tracebackhide__ = True
        given = dict(
            in_place=in_place,
            max_footprint=max_footprint,
            max_peak=max_peak,
            max_live_peak=max_live_peak,
            min_bytes=min_bytes,
            donate=donate,
            static=static,
            new=new,
            backend=backend,
        )
        return self._check("function", fn, args, kwargs, given, name)

    def chain(
        self,
        steps: list[Callable[..., Any]] | tuple[Callable[..., Any], ...],
        *args: Any,
        in_place: bool = _UNSET,
        max_footprint: int | str | None = _UNSET,
        max_peak: int | str | None = _UNSET,
        max_live_peak: int | str | None = _UNSET,
        min_bytes: int | str = _UNSET,
        donate: Any = _UNSET,
        static: Any = _UNSET,
        name: str | None = None,
        step_args: Any = None,
        backend: str | list[str] | tuple[str, ...] | None = _UNSET,
        **kwargs: Any,
    ) -> Report:
        """Check the update chain ``steps`` started on ``steps[0](*args, **kwargs)`` (see docs/chains.md);
        fail the test when a step breaks in place (``in_place``) or a step or the fused chain is over budget.

        The limits are taken as for a single function. ``step_args`` gives steps
        extras besides the state, as :func:`fieldmem.check_chain` takes them.

        Returns:
            The Report (``report.chains[0]``, and a result per step and for the fused chain).

        Raises:
            NotInPlaceError: a check failed; the message names the step, the leaf and the line.
        """
        __tracebackhide__ = True
        given = dict(
            in_place=in_place,
            max_footprint=max_footprint,
            max_peak=max_peak,
            max_live_peak=max_live_peak,
            min_bytes=min_bytes,
            donate=donate,
            static=static,
            backend=backend,
        )
        if step_args is not None:
            kwargs = {**kwargs, "step_args": step_args}
        return self._check("chain", steps, args, kwargs, given, name)

    def _check(
        self,
        kind: str,
        subject: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        given: dict[str, Any],
        name: str | None,
    ) -> Report:
        """Check ``subject`` (a function, or a chain's steps: ``kind``) on ``args`` under the limits in force
        (``given`` overriding them), record the report for --fieldmem-report, and fail the test when a check
        failed."""
        __tracebackhide__ = True
        from fieldmem.frontends.api import NotInPlaceError
        from fieldmem.request.target import in_hand_key, in_hand_name

        limits = _override(self.limits, {k: v for k, v in given.items() if v is not _UNSET}, "{}=")
        settings: dict[str, Any] = dict(
            donate=limits.donate,
            static=limits.static,
            name=name,
            expect="in-place" if limits.in_place else "any",
            max_peak=limits.max_peak,
            max_live_peak=limits.max_live_peak,
        )
        if kind == "function":  # a chain's outputs are its steps'
            settings["new"] = limits.new
        elif "step_args" in kwargs:
            kwargs = dict(kwargs)
            settings["step_args"] = kwargs.pop("step_args")
        report: Report | None = None
        failed: NotInPlaceError | None = None
        display, key = in_hand_name(kind, subject, name), in_hand_key(kind, subject, name)
        for backend in limits.backend or (None,):
            report = self._session.check(kind, subject, args, kwargs, settings, limits.min_bytes, backend)
            several = limits.backend is not None and len(limits.backend) > 1
            self._session.record(report, self._nodeid, backend if several else None, display, key)
            broken = next((r for r in report.results if r.status == "error" and r.error is not None), None)
            if broken is not None and broken.error is not None:  # recorded, then the test's failure
                on = f" on {backend}" if several else ""
                problem = f"fieldmem: error: {broken.name}{on}: {broken.error.message}"
                pytest.fail(problem, pytrace=False)
            if report.exit_code != 0 and failed is None:
                failed = NotInPlaceError(report)
                if several:  # say which backend failed, and keep checking the others
                    failed.args = (f"on {backend}: {failed.args[0]}",)
        if failed is not None:
            raise failed
        assert report is not None
        return report


@pytest.fixture
def fieldmem_check(request: pytest.FixtureRequest) -> FieldmemCheck:
    """Assert that an update is in place with donation and within its memory budgets::

    @pytest.mark.fieldmem(max_live_peak="64MiB")
    def test_step(fieldmem_check):
        fieldmem_check(step, params, opt_state, grads, donate="params,opt_state")
    """
    session = request.config.stash[_SESSION]
    try:
        limits = _marker_limits(request.node, session.defaults)
    except FieldmemError as exc:
        problem = exc.message
    else:
        return FieldmemCheck(limits, session, request.node.nodeid)
    # outside the except block, so pytest shows one line, not a chained exception
    pytest.fail(f"fieldmem: error: {problem}", pytrace=False)


@pytest.fixture
def fieldmem_fit() -> Callable[..., Any]:
    """Search what of a step fits (:func:`fieldmem.fit`, in the test's process) and fail the test when a
    floor (``at_least=``), ``expect="fits"`` or a compile does not hold; returns the
    :class:`~fieldmem.model.fit_report.FitReport`::

    def test_batch_still_fits(fieldmem_fit):
        fieldmem_fit(train_step, make_args, vary={"batch": "1..4096"}, at_least={"batch": 256}, backend="tpu:v5e")
    """

    def fit(step: Callable[..., Any], make_args: Callable[..., Any], **settings: Any) -> Any:
        __tracebackhide__ = True
        from fieldmem.frontends.fit_api import fit as search
        from fieldmem.frontends.fit_api import fit_failure_message

        try:
            report = search(step, make_args, **settings)
        except FieldmemError as exc:
            problem = f"fieldmem: error: {exc.message}"
        else:
            if report.exit_code == 0:
                return report
            problem = fit_failure_message(report)
        pytest.fail(problem, pytrace=False)

    return fit


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, in the controller: take the checks a worker handed over when it ended."""
    state = node.config.stash.get(_SESSION, None)
    handed = getattr(node, "workeroutput", {}).get("fieldmem")
    if state is not None and handed:
        state.take_over(handed)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A pytest-xdist worker hands its checks to the controller; the controller (or pytest without xdist)
    writes --fieldmem-report (atomically) once every test has run, then gates against and saves the baseline."""
    state = session.config.stash.get(_SESSION, None)
    if state is None:
        return
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["fieldmem"] = state.handed_over()  # type: ignore[attr-defined]
        return
    if state.from_workers:  # in the order the tests are named, not the order the workers ended
        state.reports.sort(key=lambda r: r.results[0].target)
        state.keyed.sort(key=lambda pair: pair[0])
    _write_report(session, state)
    if state.baseline is not None or state.save_to is not None:
        _gate(state, session.testsfailed or exitstatus != pytest.ExitCode.OK)
        if state.gate_failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _write_report(session: pytest.Session, state: _Session) -> None:
    if state.report_path is None:
        return
    from fieldmem.frontends.api import combine_reports
    from fieldmem.model.files import write_atomic
    from fieldmem.render import RenderOptions, get_renderer

    report = combine_reports(state.reports, state.defaults.min_bytes)
    text = get_renderer("json").render(report, RenderOptions(min_bytes=report.min_bytes))
    try:
        write_atomic(state.report_path, text)
    except OSError as exc:
        state.write_error = f"cannot write {str(state.report_path)!r}: {exc.strerror or exc}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    state.written = f"{len(report.results)} fieldmem check(s) written to {state.report_path}"


def _by_backend(state: _Session) -> list[Report]:
    """The session's checks as one report per backend and device kind (a baseline entry's key), their results
    named by their baseline keys.

    Raises:
        BaselineError: two checks have one key on one backend (a baseline holds one entry per key).
    """
    from fieldmem.frontends.api import combine_reports
    from fieldmem.gate.baseline import BaselineError, project_name

    groups: dict[tuple[str, str], list[Report]] = {}
    checked_by: dict[tuple[str, str, str], list[str]] = {}
    for nodeid, report in state.keyed:
        kind = (report.devices[0].kind or report.devices[0].platform) if report.devices else ""
        groups.setdefault((report.backend, kind), []).append(report)
        root = state.root or (state.baseline or state.save_to or Path()).absolute().parent
        for result in report.results:
            checked_by.setdefault((report.backend, kind, project_name(result.name, result.target, root)), []).append(
                nodeid
            )
    clashes = [(key, nodeids) for key, nodeids in checked_by.items() if len(nodeids) > 1]
    if clashes:
        (backend, _, name), nodeids = clashes[0]
        more = f" ({len(clashes) - 1} more name(s) likewise)" if len(clashes) > 1 else ""
        raise BaselineError(
            f"{name} is checked {len(nodeids)} times on {backend} ({', '.join(dict.fromkeys(nodeids))}){more}: "
            "a baseline holds one entry per name, so give each check its own, "
            "e.g. fieldmem_check(update, *args, name='update-64x64')"
        )
    return [combine_reports(reports, state.defaults.min_bytes) for reports in groups.values()]


def _gate(state: _Session, failed: int | bool = 0) -> None:
    """Compare the session's checks with the baseline (every regression collected, said once) and save them,
    with :mod:`fieldmem.gate.baseline` as ``fieldmem check`` does; what it says goes to the terminal summary.
    ``failed``: the tests that failed (True: the session failed otherwise: an error, an interruption), where
    nothing is saved: the baseline records a session where every test passed."""
    from fieldmem.gate.baseline import BaselineError, compare_to_baseline, load_baseline, save_baseline
    from fieldmem.render.baseline import render_comparison, render_saved

    if not state.keyed:
        state.summary.append("fieldmem: no fieldmem_check ran: nothing compared with or saved in the baseline")
        return
    try:
        reports = _by_backend(state)
        if state.baseline is not None:
            baseline = load_baseline(state.baseline)
            reports = [compare_to_baseline(r, baseline, state.tolerances, root=state.root) for r in reports]
    except BaselineError as exc:
        state.summary.append(f"fieldmem: error: {exc.message}")
        state.gate_failed = True
        return
    regressions = 0
    unmatched: list[str] = []
    for report in reports:
        if report.baseline is not None:
            state.summary.extend(render_comparison(report.baseline).rstrip("\n").splitlines())
            regressions += len(report.baseline.regressions)
            unmatched += [
                c.message for c in report.baseline.regressions if c.kind == "status" and c.subject == "missing"
            ]
    if unmatched:
        # a baseline that matches none of the session's checks gates nothing: that fails, asked or not
        state.summary.append(f"fieldmem: error: {unmatched[0]}")
        state.gate_failed = True
    elif regressions and state.compare_fail:
        state.summary.append(
            f"fieldmem: error: {regressions} regression(s) against the baseline {str(state.baseline)!r}: "
            "the session fails (--fieldmem-compare-fail)"
        )
        state.gate_failed = True
    elif regressions:
        state.summary.append(
            f"fieldmem: {regressions} regression(s) against the baseline {str(state.baseline)!r} "
            "(add --fieldmem-compare-fail to fail the session on them)"
        )
    if state.save_to is None:
        return
    if failed:
        tests = "the session did not pass" if failed is True else f"{failed} test(s) failed"
        state.summary.append(
            f"fieldmem: not saving the baseline {str(state.save_to)!r}: {tests}, and a baseline records a "
            "session where every test passed"
        )
        return
    for report in sorted(reports, key=lambda r: r.exit_code == 0):  # a refused save writes no backend
        try:
            saved = save_baseline(state.save_to, report, root=state.root)
        except BaselineError as exc:
            state.summary.append(f"fieldmem: error: {exc.message}")
            state.gate_failed = True
            return
        state.summary.extend(render_saved(saved).rstrip("\n").splitlines())


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the worker the session's checks kept warm."""
    state = config.stash.get(_SESSION, None)
    if state is not None:
        state.close()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None:
        return
    if state.write_error is not None:
        terminalreporter.write_line(f"fieldmem: error: {state.write_error}", red=True)
    elif state.written is not None:
        terminalreporter.write_line(f"fieldmem: {state.written}")
    for line in state.summary:
        terminalreporter.write_line(line, red=line.startswith(("fieldmem: error:", "  ✗")))
