"""The option table (fieldmem/request/option_table.py): every front end is built from it.

The table agrees with what each front end takes today (the API's keywords and defaults, the config's keys,
the command's parameters), and an option added to it, in a scratch copy of the package, is on all four:
``fieldmem check --help``, ``[tool.fieldmem]``, the API's keywords and the plugin's options and ini names.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from fieldmem.frontends.api import assert_in_place, check_chain, check_function
from fieldmem.frontends.check_cli import check
from fieldmem.request.config import KEYS, TARGET_KEYS
from fieldmem.request.option_table import OPTIONS, api_options, cli_options, config_keys, plugin_options

ROOT = Path(__file__).resolve().parents[2]


def test_every_name_is_one_option() -> None:
    names = [row.name for row in OPTIONS]
    assert len(names) == len(set(names))
    for column in ("cli", "config", "pytest", "ini", "api"):
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
    probe = run("-c", PROBE, str(tmp_path / "pyproject.toml"))
    found = json.loads(probe.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(copy)
    assert found == {**found, "api": True, "config": True, "key": "true or false"}
    plugin = run("-m", "pytest", "--help", "-p", "no:cacheprovider")
    assert "--fieldmem-quick=yes|no" in plugin
    assert "fieldmem_quick (string)" in plugin
