"""What ships fieldmem beside the package: the GitHub Action (action.yml), the pre-commit hook
(.pre-commit-hooks.yaml) and the package data.

The Action's scripts run here under bash with a stand-in ``python`` that records what it is asked, and once
with the real one; the hook's entry runs as pre-commit runs it. Building the wheel and installing it into a
fresh venv is ``make package-check`` (tests/package_check.py), which .ci/run calls.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
import typer
import yaml

from fieldmem.frontends.cli import app
from fieldmem.request.options import FORMATS

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# a python that writes its arguments, one per line, into $ARGV_FILE and exits $EXIT (0 by default)
STAND_IN = '#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGV_FILE"\nexit "${EXIT:-0}"\n'


def step(name: str) -> dict[str, Any]:
    return next(s for s in ACTION["runs"]["steps"] if s.get("name") == name)


def check_options() -> set[str]:
    command = typer.main.get_command(app).commands["check"]  # type: ignore[attr-defined]
    return {option for param in command.params for option in [*param.opts, *param.secondary_opts]}


def run_step(name: str, tmp_path: Path, env: dict[str, str], python: str | None = None) -> tuple[int, list[str]]:
    """Run the step's script as the runner does (bash, its env), ``python`` the stand-in or the one given."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir(exist_ok=True)
    stand_in = bin_folder / "python"
    if python is None:
        stand_in.write_text(STAND_IN)
        stand_in.chmod(0o755)
    else:
        stand_in.unlink(missing_ok=True)
        stand_in.symlink_to(python)
    argv_file = tmp_path / "argv"
    argv_file.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step(name)["run"]],
        cwd=env.pop("CWD", str(tmp_path)),
        env={**os.environ, "PATH": f"{bin_folder}:{os.environ['PATH']}", "ARGV_FILE": str(argv_file), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    argv = argv_file.read_text().splitlines() if argv_file.exists() else []
    return done.returncode, argv


# -- action.yml ----------------------------------------------------------------------------------------------


def test_the_action_uses_every_input_and_no_other() -> None:
    steps = yaml.safe_dump(ACTION["runs"]["steps"])
    used = set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", steps))
    assert used == set(ACTION["inputs"])
    assert ACTION["runs"]["using"] == "composite"
    for each in ACTION["runs"]["steps"]:
        # an input reaches a script through its env, never pasted into it (a target named `$(rm -rf ~)`)
        assert "${{" not in each.get("run", ""), each["name"]
        assert "run" not in each or each.get("shell") == "bash"
    assert "github.action_path" in steps  # fieldmem comes from the action's own checkout: no index serves it


def test_the_action_calls_only_options_fieldmem_check_has() -> None:
    script = step("fieldmem check")["run"]
    written = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", script))
    assert written == {"--baseline", "--backend", "--tolerance", "--format"}
    assert written <= check_options()
    # the formats action.yml's format input names, and the one it defaults to
    named = set(re.findall(r"\b(github|table|markdown|json|html)\b", ACTION["inputs"]["format"]["description"]))
    assert named <= set(FORMATS) and ACTION["inputs"]["format"]["default"] == "github"


def test_the_action_builds_the_command_line_from_its_inputs(tmp_path: Path) -> None:
    output = tmp_path / "github-output"
    env = {
        "FIELDMEM_TARGETS": "model.py:step\n  pkg.model:update examples/*.py",
        "FIELDMEM_BASELINE": "fieldmem baseline.json",
        "FIELDMEM_BACKEND": "cpu,tpu:v5e",
        "FIELDMEM_TOLERANCE": "2%",
        "FIELDMEM_FORMAT": "github",
        "FIELDMEM_ARGS": "--expect in-place --min-bytes 4KiB",
        "GITHUB_OUTPUT": str(output),
        "EXIT": "1",
    }
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "a.py").write_text("")
    status, argv = run_step("fieldmem check", tmp_path, env)
    assert status == 1 and output.read_text() == "exit-code=1\n"
    assert argv == [
        "-m",
        "fieldmem",
        "check",
        "model.py:step",
        "pkg.model:update",
        "examples/*.py",  # a word, not a pattern the shell expands
        "--baseline",
        "fieldmem baseline.json",
        "--backend",
        "cpu,tpu:v5e",
        "--tolerance",
        "2%",
        "--format",
        "github",
        "--expect",
        "in-place",
        "--min-bytes",
        "4KiB",
    ]
    status, argv = run_step("fieldmem check", tmp_path, {"GITHUB_OUTPUT": str(output)})
    assert (status, argv) == (0, ["-m", "fieldmem", "check", "--format", "github"])  # the targets of the config


def test_a_markdown_report_goes_to_the_job_summary_and_the_exit_code_survives_the_pipe(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    env = {"FIELDMEM_FORMAT": "markdown", "GITHUB_STEP_SUMMARY": str(summary), "EXIT": "2"}
    status, argv = run_step("fieldmem check", tmp_path, env)
    assert status == 2 and argv[-2:] == ["--format", "markdown"]
    assert summary.exists()


@pytest.mark.parametrize(
    ("backend", "extras"),
    [("", ""), ("cpu", ""), ("gpu", ""), ("tpu:v5e", "[tpu]"), ("cpu,gpu:h100,tpu:v5e:2x2", "[tpu,gpu]")],
)
def test_the_action_installs_the_extras_its_backend_needs(tmp_path: Path, backend: str, extras: str) -> None:
    env = {"FIELDMEM_SOURCE": "/actions/fieldmem", "FIELDMEM_BACKEND": backend}
    status, argv = run_step("Install fieldmem", tmp_path, env)
    assert status == 0
    assert argv == ["-m", "pip", "install", "--disable-pip-version-check", f"/actions/fieldmem{extras}"]


@pytest.mark.compile
def test_the_action_checks_for_real_and_writes_the_job_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    env = {
        "CWD": str(ROOT),
        "FIELDMEM_TARGETS": "examples/field.py",
        "FIELDMEM_FORMAT": "github",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "FIELDMEM_CACHE_DIR": "none",
    }
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step("fieldmem check")["run"]],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "::notice::fieldmem" in done.stdout
    assert "field:update" in summary.read_text()
    assert (tmp_path / "github-output").read_text() == "exit-code=0\n"


# -- .pre-commit-hooks.yaml ----------------------------------------------------------------------------------


def test_the_pre_commit_hook_runs_fieldmem_check_on_the_whole_project() -> None:
    assert [h["id"] for h in HOOKS] == ["fieldmem-check"]
    hook = HOOKS[0]
    assert hook["language"] == "python"  # pre-commit pip-installs this repository: the console script is there
    assert hook["pass_filenames"] is False  # the targets come from [tool.fieldmem], not the staged files
    command, *arguments = shlex.split(hook["entry"])
    assert command in PYPROJECT["project"]["scripts"]
    assert arguments == ["check"] and {"check"} <= set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.compile
def test_the_pre_commit_hook_entry_passes_and_fails_as_fieldmem_does(tmp_path: Path) -> None:
    """As pre-commit runs it: the entry, no file names, from the project's root (examples/ci: its
    [tool.fieldmem] names the targets and a baseline); a regression fails the commit."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "ci", project)
    entry = [str(Path(sys.executable).parent / w) if w == "fieldmem" else w for w in shlex.split(HOOKS[0]["entry"])]
    env = {**os.environ, "FIELDMEM_CACHE_DIR": "none", "COLUMNS": "120"}

    def commit(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*entry, *extra], cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
        )

    saved = commit("--save-baseline", "fieldmem-baseline.json")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert commit().returncode == 0
    model = project / "model.py"
    model.write_text(
        model.read_text().replace("return State(u=u, v=state.v * 0.5)", "return State(u=u, v=state.v * 0.5), state.u")
    )
    failed = commit()
    assert failed.returncode == 1 and "regression" in failed.stdout


# -- package data --------------------------------------------------------------------------------------------


def test_every_data_file_of_the_package_is_shipped() -> None:
    """A file under fieldmem/ that is not Python reaches the wheel only through [tool.setuptools.package-data]."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]
    package = ROOT / "fieldmem"
    unshipped = []
    for path in sorted(package.rglob("*")):
        if not path.is_file() or path.suffix in (".py", ".pyc", ".pyi") or "__pycache__" in path.parts:
            continue
        folder = path.parent
        shipped = False
        while folder != package.parent:
            owner = ".".join(folder.relative_to(package.parent).parts)
            inside = path.relative_to(folder)
            shipped |= any(inside.match(p) and len(inside.parts) == len(Path(p).parts) for p in patterns.get(owner, ()))
            folder = folder.parent
        if not shipped:
            unshipped.append(str(path.relative_to(ROOT)))
    assert unshipped == []
    assert json.loads((package / "schemas" / "report.schema.json").read_text())["title"].startswith("fieldmem.report/")
