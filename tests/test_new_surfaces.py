"""Issue 49: nothing lost and no false pass on the surfaces that landed since the last hostile round:
one name per target, functions with nothing to update, modules that patch jax, the files fieldmem
writes, the cached environments, tolerances and ``--config``.

Each test failed on the main branch before these fixes (a false pass, a replaced FIFO or device, a
traceback, a hang). What would hang runs with a short bound. No environment with another jax is
downloaded: the installer and the interpreters are fakes, as in ``tests/test_envs.py``.
"""

from __future__ import annotations

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


# ---- item 2: nothing to update is never in place ------------------------------------------------------------


def _returns_none(u: Any) -> None:
    return None


def _returns_new(u: Any) -> Any:
    import jax.numpy as jnp

    return jnp.zeros_like(u) + 1.0  # the donated size, without reading u: jit drops u


def _returns_sum(u: Any) -> Any:
    return u.sum()


@pytest.mark.compile
@pytest.mark.parametrize("update", [_returns_none, _returns_new, _returns_sum], ids=["none", "new", "reduction"])
def test_a_function_whose_outputs_reuse_nothing_fails_expect_in_place(update: Any) -> None:
    """Returning None, or a new array of the donated size, read "✓ expect-in-place: in place with donation"
    beside "u is donated but unusable"; a reduction was already "nothing to update"."""
    import jax.numpy as jnp

    from fieldmem.api import check_function

    report = check_function(update, jnp.ones((64, 64)), expect="in-place")
    (result,) = report.results
    assert result.verdict is not None and result.verdict.kind == "nothing-to-update", result.verdict
    assert result.verdict.summary.startswith("nothing to update in place: no output can reuse a donated buffer; u ")
    (check,) = result.checks
    assert not check.passed and "nothing to update in place" in check.message
    assert report.exit_code == 1
    assert not any(f.code == "state-grows" for f in result.verdict.findings)  # u was dropped, not outgrown


@pytest.mark.compile
def test_a_function_returning_what_jax_jit_refuses_is_jax_error() -> None:
    """A function returning a string is refused by jax.jit ("not a valid JAX type"); fieldmem said it was in
    place with donation."""
    import jax.numpy as jnp

    from fieldmem.api import check_function
    from fieldmem.errors import CompileError

    with pytest.raises(CompileError, match="returned a value of type <class 'str'>, which is not a valid JAX type"):
        check_function(lambda u: "hello", jnp.ones((64, 64)), expect="in-place")
