"""The pytest plugin's options (``--fieldmem-*`` and their ini twins), parsed once at configure time into
the session (:class:`~fieldmem.frontends.pytest_session._Session`); a bad value is a usage error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fieldmem.frontends.pytest_session import (
    DEFAULT_TIMEOUT,
    Limits,
    _Session,
)
from fieldmem.model.errors import OptionError
from fieldmem.model.units import parse_bytes
from fieldmem.request.options import MIN_BYTES
from fieldmem.request.tolerance import Tolerances

__all__ = ["pytest_addoption"]


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
    "write the JSON report (fieldmem.model.report/2) of every fieldmem_check in the session to PATH",
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
