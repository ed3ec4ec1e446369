"""Issue 49: nothing lost and no false pass on the surfaces that landed since the last hostile round:
one name per target, functions with nothing to update, modules that patch jax, the files fieldmem
writes, the cached environments, tolerances and ``--config``.

Each test failed on the main branch before these fixes (a false pass, a replaced FIFO or device, a
traceback, a hang). What would hang runs with a short bound. No environment with another jax is
downloaded: the installer and the interpreters are fakes, as in ``tests/test_envs.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def check(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120", **(env or {})})


def fieldmem_lines(stderr: str) -> list[str]:
    """fieldmem's own lines of stderr (jax's absl and plugin lines left out)."""
    return [line for line in stderr.splitlines() if line.startswith("fieldmem:")]


def one_error_line(result: Any, *expected: str) -> str:
    """Exit 2, no traceback, one ``fieldmem: error:`` line holding each of ``expected``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = fieldmem_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("fieldmem: error: "), result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


# ---- item 1: one name, one entry ----------------------------------------------------------------------------

CASE_NAMED = """\
import jax.numpy as jnp
import fieldmem


def update(u):
    return u.at[0].set(1.0)


fieldmem.case(update, args=lambda: (jnp.ones(({rows}, 64)),), name="dupsz")
"""


@pytest.mark.compile
def test_two_files_registering_one_case_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save said "1 target recorded" and kept one file's entry; growing a.py 9x then passed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(CASE_NAMED.format(rows=64))
    (tmp_path / "b.py").write_text(CASE_NAMED.format(rows=64))
    for extra in ([], ["--save-baseline", "base.json"], ["--save-baseline", "base.json", "--accept-current"]):
        result = check("a.py", "b.py", "-o", "report.json", *extra)
        one_error_line(result, "a.py and b.py both have a target named 'dupsz'")
        assert result.stdout == ""
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a.py", "b.py"]
