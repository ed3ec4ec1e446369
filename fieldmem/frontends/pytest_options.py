"""The pytest plugin's options (``--fieldmem-*`` and their ini twins), parsed once at configure time into
the session (:class:`~fieldmem.frontends.pytest_session.PluginSession`); a bad value is a usage error naming it.
Each check's limits (:class:`~fieldmem.frontends.pytest_session.Limits`) are the option table's
(:func:`~fieldmem.request.option_table.limit_options`), read here by :func:`parse_limit`, whether they come
from an option, its ini twin, ``[tool.fieldmem]``, a marker or the fixture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fieldmem.frontends.pytest_session import (
    DEFAULT_TIMEOUT,
    Limits,
    PluginSession,
)
from fieldmem.model.errors import OptionError
from fieldmem.model.units import parse_bytes
from fieldmem.model.versions import check_supported
from fieldmem.request.option_table import Option, limit_options, option, plugin_options
from fieldmem.request.options import CheckOptions, parse_backends, parse_jax_versions, parse_new
from fieldmem.request.tolerance import Tolerances

__all__ = ["parse_limit", "parse_session", "pytest_addoption", "with_limits"]

#: The limits read as sizes (None: no budget, or for min_bytes the default threshold)
_SIZES = ("max_peak", "max_live_peak", "min_bytes")


def parse_limit(row: Option, value: Any, label: str) -> Any:
    """``value`` of the limit ``row`` as :class:`~fieldmem.frontends.pytest_session.Limits` keeps it (None:
    the table's ``marker_default``); ``label`` names it as the user gave it (``--fieldmem-min-bytes``,
    ``@pytest.mark.fieldmem new=``). A limit this does not name (an option added to the table) is taken as
    given.

    Raises:
        OptionError: a value the limit does not take, naming what was given.
    """
    if row.name == "in_place":
        if not isinstance(value, bool):
            raise OptionError(f"{label}{value!r} is not understood: use True or False")
        return value
    if value is None:
        return row.marker_default
    if row.name in _SIZES:
        return parse_bytes(value, label)
    if row.name == "new":
        return parse_new(value, label)
    if row.name == "backend":
        return parse_backends(value, label)
    return value


def with_limits(limits: Limits, values: Mapping[str, Any]) -> Limits:
    """``limits`` with ``values`` (parsed, by option name) in: each a field of ``Limits``, or else one of its
    ``table_options`` (None: left to the check's default).

    Raises:
        OptionError: a value for an option that no check reads (``CheckOptions`` has no field of its name).
    """
    named = {f.name for f in dataclasses.fields(Limits)}
    held = {f.name for f in dataclasses.fields(CheckOptions)}
    table = dict(limits.table_options)
    for name, value in values.items():
        if name in named:
            continue
        if value is None:
            table.pop(name, None)
        elif name in held:
            table[name] = value
        else:
            row = option(name)
            raise OptionError(
                f"{row.pytest or f'{row.marker}='} is an option of the table that no check reads yet "
                f"(CheckOptions has no {name})"
            )
    changes = {name: value for name, value in values.items() if name in named}
    return dataclasses.replace(limits, **changes, table_options=tuple(table.items()))


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
    assert row.pytest is not None
    value = config.getoption(f"fieldmem_{row.name}")
    if value is not None:
        return value, row.pytest
    if row.ini is None:
        return None, row.pytest
    for ini in (row.ini, *((row.pytest_older[1],) if row.pytest_older else ())):
        value = config.getini(ini)
        if value is True:  # a flag's ini twin
            return "yes", f"ini {ini}"
        if isinstance(value, str) and value.strip():
            return value.strip(), f"ini {ini}"
    return None, f"ini {row.ini}"


def _typed(row: Option, text: Any, label: str) -> Any:
    """An option's text (or a flag's True) as the table's type of ``row`` says: yes or no for a bool, a
    number for an int or a float; else as given (sizes, names: :func:`parse_limit` reads them)."""
    if not isinstance(text, str):
        return text
    if row.type in (bool, bool | None):
        if text.lower() not in ("yes", "no", "true", "false", "1", "0"):
            raise OptionError(f"{label} {text!r} is not understood: use yes or no")
        return text.lower() in ("yes", "true", "1")
    for kind, example in ((int, "8"), (float, "1.5")):
        if row.type in (kind, kind | None):
            try:
                return kind(text)
            except ValueError:
                raise OptionError(f"{label} {text!r} is not understood: give a number, e.g. {example}") from None
    return text


def _defaults(config: pytest.Config, project: Any) -> Limits:
    """Each check's limits where its marker and its call set none: the table's limits
    (:func:`~fieldmem.request.option_table.limit_options`), each from its option, else its ini twin, else
    ``[tool.fieldmem]``, else the table's ``marker_default``.

    Raises:
        OptionError: a value a limit does not take, naming where it was given.
    """
    # what [tool.fieldmem] gives a function in hand: the budgets, the threshold and the backends; not a
    # target's donate, static or new; a limit not named here (an option added to the table), its key's value
    from_project = {
        "max_peak": project.options.max_peak,
        "max_live_peak": project.options.max_live_peak,
        "min_bytes": project.min_bytes,
        "backend": project.backends,
        "in_place": True,
        "donate": None,
        "static": None,
        "new": None,
    }
    values: dict[str, Any] = {}
    for row in limit_options():
        value, label = _setting(config, row) if row.pytest is not None else (None, "")
        if value is not None:
            values[row.name] = parse_limit(row, _typed(row, value, label), label)
        elif row.name in from_project:
            values[row.name] = from_project[row.name] if from_project[row.name] is not None else row.marker_default
        else:
            values[row.name] = parse_limit(row, project.values.get(row.name), f"[tool.fieldmem] {row.config} =")
    return with_limits(Limits(), values)


def _path(config: pytest.Config, value: str, label: str, flag: str | None) -> Path:
    """A path option's file: a command-line path is relative to where pytest runs, an ini one to the ini file."""
    base = (
        config.invocation_params.dir
        if label == flag
        else (config.inipath.parent if config.inipath is not None else config.rootpath)
    )
    return base / value


def parse_session(config: pytest.Config) -> PluginSession:
    # here, not at the top: at the top, these make loading the plugin 1.30 s, not 0.37 s (measured 2026-12-06)
    from fieldmem.request.config import load_config

    project = load_config(start=config.invocation_params.dir)  # [tool.fieldmem], as fieldmem check finds it
    defaults = _defaults(config, project)
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
    isolate = bool(_typed(option("isolate"), value, label)) if value is not None else True
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
    session = PluginSession(
        defaults=defaults, report_path=report_path, isolate=isolate, timeout=timeout, jax=jax_release
    )
    _parse_baseline(config, project, session)
    _refuse_report_on_baseline(session, label=_setting(config, option("report"))[1])
    return session


def _refuse_report_on_baseline(session: PluginSession, label: str) -> None:
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


def _parse_baseline(config: pytest.Config, project: Any, session: PluginSession) -> None:
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
