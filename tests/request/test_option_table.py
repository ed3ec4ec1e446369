"""The option table (fieldmem/request/option_table.py): every front end is built from it.

The table agrees with what each front end takes today (the API's keywords and defaults, the config's keys,
the command's parameters, the plugin's limits, marker and fixture keywords), and an option added to it, in a
scratch copy of the package, is on all four: ``fieldmem check --help``, ``[tool.fieldmem]``, the API's
keywords and the plugin's options, ini names and marker, each reaching the options of the checks it runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from fieldmem.frontends.api import assert_in_place, check_chain, check_function
from fieldmem.frontends.check_cli import check
from fieldmem.frontends.pytest_plugin import _MARKER_HELP, FieldmemCheck
from fieldmem.frontends.pytest_session import Limits
from fieldmem.request.config import KEYS, TARGET_KEYS
from fieldmem.request.option_table import (
    OPTIONS,
    api_options,
    cli_options,
    config_keys,
    limit_options,
    marker_options,
    plugin_options,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_name_is_one_option() -> None:
    names = [row.name for row in OPTIONS]
    assert len(names) == len(set(names))
    for column in ("cli", "config", "pytest", "ini", "api", "marker"):
        taken = [getattr(row, column) for row in OPTIONS if getattr(row, column)]
        assert len(taken) == len(set(taken)), column


def test_the_api_takes_each_keyword_with_the_default_the_table_says() -> None:
    parameters = inspect.signature(check_function).parameters
    for row in api_options():
        assert row.api in parameters, row.name
        if row.name != "name":
            assert parameters[row.api].default == row.api_default, row.name
    for function in (check_chain, assert_in_place):
        taken = inspect.signature(function).parameters
        assert {row.api for row in api_options() if row.name not in ("new", "expect")} <= set(taken)


def test_the_command_and_the_config_are_the_table() -> None:
    assert list(inspect.signature(check).parameters) == [row.name for row in cli_options()]
    assert config_keys() == KEYS
    assert tuple(config_keys(per_target=True)) == TARGET_KEYS
    assert {row.pytest for row in plugin_options()} >= {"--fieldmem-max-footprint", "--fieldmem-save-baseline"}


def test_the_plugins_limits_marker_and_fixture_are_the_table() -> None:
    # Limits: a field per marker keyword, in the marker's order, with the table's default
    fields = [f for f in dataclasses.fields(Limits) if f.name != "table_options"]
    assert [f.name for f in fields] == [row.name for row in marker_options()]
    assert [f.default for f in fields] == [row.marker_default for row in marker_options()]
    # every limit is a marker keyword or a plugin option that is not the session's (none today)
    assert limit_options() == marker_options()
    keywords = {keyword for row in marker_options() for keyword in (row.marker, row.marker_older) if keyword}
    chained = {keyword for row in marker_options() if row.marker_chain for keyword in (row.marker, row.marker_older)}
    for method, taken in ((FieldmemCheck.__call__, keywords), (FieldmemCheck.chain, chained - {None})):
        parameters = inspect.signature(method).parameters
        named = {p.name for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        assert named - {"name", "step_args"} == taken, method
    assert _MARKER_HELP.startswith(
        "fieldmem(in_place=True, max_footprint=None, max_live_peak=None, min_bytes=None, donate=None, static=None, "
        "new=None, backend=None): "
    )


QUICK = """
    Option(
        "quick",
        bool,
        False,
        "Check quickly (an option added in a test).",
        cli=("--quick",),
        config="quick",
        config_holds="true or false",
        config_types=(bool,),
        pytest="--fieldmem-quick",
        ini="fieldmem_quick",
        pytest_metavar="yes|no",
        pytest_help="check quickly in every fieldmem_check (an option added in a test)",
        api="quick",
        marker="quick",
    ),
"""

PROBE = textwrap.dedent(
    """
    import json, sys, types
    from pathlib import Path

    import fieldmem
    import fieldmem.parent.checker as checker
    from fieldmem.frontends.api import check_function
    from fieldmem.request.config import KEYS, load_config

    seen = []

    def check_targets(targets, options):
        seen.append(options)
        return types.SimpleNamespace(results=[types.SimpleNamespace(status="ok")])

    checker.check_targets = check_targets
    check_function(lambda x: x, 1.0, quick=True)
    pyproject = Path(sys.argv[1])
    pyproject.write_text("[tool.fieldmem]\\nquick = true\\n")
    print(json.dumps({
        "package": fieldmem.__file__,
        "api": seen[0].quick,
        "config": load_config(pyproject).values.get("quick"),
        "key": KEYS.get("quick"),
    }))
    """
)


PLUGIN_PROBE = textwrap.dedent(
    """
    import json

    import pytest

    import fieldmem.frontends.api as api
    import fieldmem.parent.checker as checker
    from fieldmem.frontends.pytest_session import check_options


    class Seen(Exception):
        pass


    def quick(limits, backend=None):  # what the CheckOptions of a check under limits say
        return check_options(limits.min_bytes, backend, limits.table_options).quick


    def test_default(fieldmem_check):
        print("QUICK default", json.dumps(quick(fieldmem_check.limits)))


    @pytest.mark.fieldmem(quick=False)
    def test_marker(fieldmem_check):
        print("QUICK marker", json.dumps(quick(fieldmem_check.limits)))


    def test_call(fieldmem_check, monkeypatch):
        def check(self, kind, subject, args, kwargs, settings, limits, backend):
            raise Seen([kwargs, quick(limits, backend)])

        monkeypatch.setattr(type(fieldmem_check._session), "check", check)
        with pytest.raises(Seen) as seen:
            fieldmem_check(lambda x, y=0: x, 1.0, quick=True, y=2)
        print("QUICK call", json.dumps(seen.value.args[0]))


    @pytest.mark.fieldmem(quick=True)
    def test_in_process(fieldmem_check, monkeypatch):
        def check_targets(targets, options):
            raise Seen(options.quick)

        monkeypatch.setattr(fieldmem_check._session, "isolate", False)
        for module in (checker, api):  # where the API finds it
            if hasattr(module, "check_targets"):
                monkeypatch.setattr(module, "check_targets", check_targets)
        with pytest.raises(Seen) as seen:
            fieldmem_check(lambda x: x, 1.0)
        print("QUICK in-process", json.dumps(seen.value.args[0]))
    """
)


def test_an_option_added_to_the_table_is_on_every_front_end(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "fieldmem", copy / "fieldmem", ignore=shutil.ignore_patterns("__pycache__"))
    table = copy / "fieldmem" / "request" / "option_table.py"
    text = table.read_text()
    end = "\n)\n\n\ndef option("
    assert end in text
    table.write_text(text.replace(end, "\n" + textwrap.dedent(QUICK).strip("\n").replace("\n", "\n    ") + end, 1))
    # what the option does is written where it is read: here, the check options' field it sets
    options = copy / "fieldmem" / "request" / "options.py"
    field = "    fast_compile: bool = True\n"
    assert field in options.read_text()
    options.write_text(options.read_text().replace(field, field + "    quick: bool = False\n", 1))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "200"}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    command = run("-m", "fieldmem", "check", "--help")
    assert "--quick" in command and "Check quickly (an option added in a test)." in command
    (tmp_path / "api").mkdir()  # its pyproject.toml is none of the plugin's projects below
    probe = run("-c", PROBE, str(tmp_path / "api" / "pyproject.toml"))
    found = json.loads(probe.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(copy)
    assert found == {**found, "api": True, "config": True, "key": "true or false"}
    plugin = run("-m", "pytest", "--help", "-p", "no:cacheprovider")
    assert "--fieldmem-quick=yes|no" in plugin
    assert "fieldmem_quick (string)" in plugin
    # the plugin's checks: the option's value, from each place it is set, reaches their CheckOptions
    for where, files, flags, default in [
        ("command line", {}, ["--fieldmem-quick", "yes"], True),
        ("ini", {"pytest.ini": "[pytest]\nfieldmem_quick = yes\n"}, [], True),
        ("config", {"pyproject.toml": "[tool.fieldmem]\nquick = true\n"}, [], True),
        ("nowhere", {}, [], False),
        (
            "ini, the command line over it",
            {"pytest.ini": "[pytest]\nfieldmem_quick = no\n"},
            ["--fieldmem-quick=1"],
            True,
        ),
    ]:
        project = tmp_path / where.replace(" ", "-").replace(",", "")
        project.mkdir()
        for name, text in {**files, "test_quick.py": PLUGIN_PROBE}.items():
            (project / name).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-q", *flags],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, where + "\n" + done.stdout + done.stderr
        seen = dict(re.findall(r"QUICK (\S+) (.+)", done.stdout))  # after pytest's progress on each line
        assert {key: json.loads(value) for key, value in seen.items()} == {
            "default": default,  # the session's default: the option, else its ini twin, else [tool.fieldmem]
            "marker": False,  # @pytest.mark.fieldmem(quick=False)
            "call": [{"y": 2}, True],  # fieldmem_check(fn, x, quick=True, y=2): y goes to fn
            "in-process": True,  # checked in pytest's process: through the API's keyword
        }, where
