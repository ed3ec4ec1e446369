"""The pytest plugin's options (``--fieldmem-*`` and their ini twins), parsed once at configure time into
the session (:class:`~fieldmem.frontends.pytest_session._Session`); a bad value is a usage error naming it.
"""

from __future__ import annotations

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
from fieldmem.model.versions import check_supported
from fieldmem.request.option_table import Option, option, plugin_options
from fieldmem.request.options import MIN_BYTES, parse_jax_versions
from fieldmem.request.tolerance import Tolerances

__all__ = ["pytest_addoption"]


_SIZE_OPTIONS = tuple(option(name) for name in ("max_peak", "max_live_peak", "min_bytes"))


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options of the option table (fieldmem.request.option_table), each with its ini twin."""
    group = parser.getgroup("fieldmem", "fieldmem: in-place and memory checks of jitted JAX updates")
    for row in plugin_options():
        assert row.pytest is not None
        if row.pytest_flag:
            group.addoption(
                row.pytest, dest=f"fieldmem_{row.name}", action="store_true", default=None, help=row.pytest_help
            )
        else:
            group.addoption(
                row.pytest,
                *((row.pytest_older[0],) if row.pytest_older else ()),
                dest=f"fieldmem_{row.name}",
                metavar=row.pytest_metavar,
                default=None,
                # argparse formats help with %: a tolerance's 2% is written 2%%
                help=row.pytest_help.replace("%", "%%"),
            )
        if row.ini is None:
            continue
        help = f"{row.pytest_help} (ini twin of {row.pytest})"
        if row.pytest_flag:
            parser.addini(row.ini, help, type="bool", default=False)
        else:
            parser.addini(row.ini, help, type="string", default=None)
        if row.pytest_older:
            parser.addini(row.pytest_older[1], f"the older name of {row.ini}", type="string", default=None)


def _setting(config: pytest.Config, row: Option) -> tuple[str | None, str]:
    """The value of the option ``row`` from the command line, else its ini twin; and how to name it."""
    assert row.pytest is not None and row.ini is not None
    value = config.getoption(f"fieldmem_{row.name}")
    if value is not None:
        return value, row.pytest
    for ini in (row.ini, *((row.pytest_older[1],) if row.pytest_older else ())):
        value = config.getini(ini)
        if isinstance(value, str) and value.strip():
            return value.strip(), f"ini {ini}"
    return None, f"ini {row.ini}"


def _path(config: pytest.Config, value: str, label: str, flag: str | None) -> Path:
    """A path option's file: a command-line path is relative to where pytest runs, an ini one to the ini file."""
    base = (
        config.invocation_params.dir
        if label == flag
        else (config.inipath.parent if config.inipath is not None else config.rootpath)
    )
    return base / value


def _parse_session(config: pytest.Config) -> _Session:
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.request.config import load_config

    project = load_config(start=config.invocation_params.dir)  # [tool.fieldmem], as fieldmem check finds it
    sizes: dict[str, Any] = {}  # int | None each
    from_project = {
        "max_peak": project.options.max_peak,
        "max_live_peak": project.options.max_live_peak,
        "min_bytes": project.min_bytes,
    }
    for row in _SIZE_OPTIONS:
        value, label = _setting(config, row)
        sizes[row.name] = parse_bytes(value, label) if value is not None else from_project[row.name]
    min_bytes = sizes.pop("min_bytes")
    defaults = Limits(min_bytes=MIN_BYTES if min_bytes is None else min_bytes, backend=project.backends, **sizes)
    value, label = _setting(config, option("report"))
    report_path = None
    if value is not None:
        report_path = _path(config, value, label, option("report").pytest)
        if report_path.is_dir():
            example = str(Path(value) / "fieldmem.json")
            raise OptionError(f"{label} {value!r} is a folder: name a file, e.g. {example!r}")
        if not report_path.parent.is_dir():
            raise OptionError(f"{label} {value!r}: the folder {str(report_path.parent)!r} does not exist")
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
        from fieldmem.model.files import not_a_file

        kind = not_a_file(report_path)
        if kind is not None:
            raise OptionError(
                f"{label} {value!r} is not a regular file ({kind}), which fieldmem never replaces: name a file"
            )
    value, label = _setting(config, option("isolate"))
    isolate = True
    if value is not None:
        if value.lower() not in ("yes", "no", "true", "false", "1", "0"):
            raise OptionError(f"{label} {value!r} is not understood: use yes or no")
        isolate = value.lower() in ("yes", "true", "1")
    value, label = _setting(config, option("timeout"))
    timeout: float | None = DEFAULT_TIMEOUT
    if value is not None:
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if not 0 <= timeout < float("inf"):
            raise OptionError(f"{label} {value!r} is not understood: give seconds, e.g. 600 (0: no limit)")
        timeout = timeout or None
    value, label = _setting(config, option("jax"))
    jax_release: str | None = None
    if value is not None:
        releases = parse_jax_versions(value, label)
        if len(releases) != 1:
            raise OptionError(f"{label} {value!r}: one release per session (run pytest once per release)")
        jax_release = releases[0]
        check_supported(jax_release)
        if not isolate:
            raise OptionError(f"{label} checks in a worker under that release: drop --fieldmem-isolate no")
    session = _Session(defaults=defaults, report_path=report_path, isolate=isolate, timeout=timeout, jax=jax_release)
    _parse_baseline(config, project, session)
    _refuse_report_on_baseline(session, label=_setting(config, option("report"))[1])
    return session


def _refuse_report_on_baseline(session: _Session, label: str) -> None:
    """The report must not be the baseline compared with or saved to: written first, it would replace the
    baseline before the gate read it (as ``fieldmem check`` refuses ``-o b.json --baseline b.json``).

    Raises:
        OptionError: ``--fieldmem-report`` names the file of ``--fieldmem-baseline`` or ``--fieldmem-save-baseline``.
    """
    if session.report_path is None:
        return
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.model.files import same_file

    compared, saved = option("baseline").pytest, option("save_baseline").pytest
    for path, flag in ((session.baseline, compared), (session.save_to, saved)):
        if path is not None and same_file(session.report_path, path):
            raise OptionError(
                f"{label} {str(session.report_path)!r} and {flag} {str(path)!r} name the same file: the report "
                "would replace the baseline; give the report its own file"
            )


def _parse_baseline(config: pytest.Config, project: Any, session: _Session) -> None:
    """The baseline options into ``session``: what is compared with, saved to, and how strictly.

    Raises:
        OptionError: a tolerance fieldmem cannot read, a baseline to compare with that does not exist (and is
            not the one this session saves), --fieldmem-compare-fail with no baseline, a path that is a folder.
    """
    value, label = _setting(config, option("tolerance"))
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
        # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
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
    value, label = _setting(config, option("baseline"))
    if value is not None:
        baseline: Path | None = _path(config, value, label, option("baseline").pytest)
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
