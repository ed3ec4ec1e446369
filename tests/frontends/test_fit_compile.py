"""``fieldmem fit`` on real compiles: its answer against plain jax, the command line, and the pytest fixture.

The steps are in ``tests/assets/fit_steps.py``: a stencil on an n x n float32 grid whose args factory
takes the grid's size. For a TPU v5e compiled without the chip, what fieldmem reports as the largest size
that fits is compiled again here with plain jax (``jax.jit(...).lower().compile()`` for the topology's
chip): it compiles, and the next size up is refused by libtpu for not fitting. The command-line and plugin
tests search on the CPU against a ``--max-peak`` budget (no device memory there), where each compile takes
milliseconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers_backends import require_extra
from typer.testing import CliRunner

import fieldmem
from fieldmem.frontends.cli import app

pytestmark = pytest.mark.compile

ASSETS = Path(__file__).parents[1] / "assets"
runner = CliRunner()


@pytest.fixture
def fit_steps(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ASSETS))
    import fit_steps

    return fit_steps


def _plain_jax_compile(step: Any, args: tuple[Any, ...]) -> str | None:
    """Compile ``step`` donating its argument for one TPU v5e chip, with plain jax; libtpu's refusal (None:
    it compiled)."""
    import jax
    from jax.experimental import topologies

    chip = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0]
    on = jax.sharding.SingleDeviceSharding(chip)
    placed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on) for a in args]
    try:
        jax.jit(step, donate_argnums=0).trace(*placed).lower().compile()
    except Exception as exc:  # XlaRuntimeError: RESOURCE_EXHAUSTED
        return str(exc).splitlines()[0]
    return None


def test_the_largest_grid_that_fits_a_v5e_compiles_and_the_next_one_up_does_not(fit_steps: Any) -> None:
    require_extra("tpu")
    report = fieldmem.fit(fit_steps.stencil, fit_steps.make_blocks, vary={"blocks": "30..42"}, backend="tpu:v5e")
    (search,) = report.searches
    (row,) = search.rows
    assert row.status == "found" and row.compiles <= 6 == search.bound  # ⌈log2 13⌉ + 2
    largest, failing = row.largest, row.smallest_failing
    assert isinstance(largest, int) and failing == largest + 1
    assert _plain_jax_compile(fit_steps.stencil, fit_steps.make_blocks(largest)) is None
    refused = _plain_jax_compile(fit_steps.stencil, fit_steps.make_blocks(failing))
    assert refused is not None and "RESOURCE_EXHAUSTED" in refused and "exceeds available HBM" in refused
    below, above = row.point_at(largest, "blocks"), row.point_at(failing, "blocks")
    assert below is not None and below.fits == "yes" and below.headroom is not None and below.headroom >= 0
    assert above is not None and above.fits == "no"
    assert row.boundary is not None and row.boundary.moves  # what grew from one to the other, by line
    assert ("u", "argument") in {(m.label, m.kind) for m in row.boundary.moves}


# ---- the command line (the CPU, a --max-peak budget) -------------------------------------------------

SEARCH = ["--args", "fit_steps:make_grid", "--vary", "n=224..320:8", "--max-peak", "1MiB"]


def _words(text: str) -> str:
    """``text`` with every run of blanks and line breaks one space: what a narrow terminal wrapped, unwrapped."""
    return " ".join(text.split())


def _fit(*args: str) -> Any:
    return runner.invoke(app, ["fit", *args], catch_exceptions=False)


def test_at_least_passes_then_fails_once_a_change_lowers_the_frontier(in_assets: Path, tmp_path: Path) -> None:
    """The largest n within 1 MiB is 295 for ``stencil``; the change that also returns the old grid needs a
    third grid-sized buffer and lowers it below the floor of 256."""
    passed = _fit("fit_steps.py:stencil", *SEARCH, "--at-least", "n=256", "-f", "json", "-o", str(tmp_path / "a.json"))
    assert passed.exit_code == 0, passed.output + passed.stderr
    assert "✓ at-least: the largest n that fits is 288, at least 256" in _words(passed.stdout)
    failed = _fit("fit_steps.py:stencil_keeping_history", *SEARCH, "--at-least", "n=256")
    assert failed.exit_code == 1, failed.output + failed.stderr
    assert "✗ at-least: the largest n that fits is 248, below the floor of 256" in _words(failed.stdout)
    document = json.loads((tmp_path / "a.json").read_text())
    (search,) = document["searches"]
    (row,) = search["rows"]
    assert (row["largest"], row["smallest_failing"], search["bound"]) == (288, 296, 6)  # ⌈log2 13⌉ + 2
    assert row["compiles"] <= 6 and search["compiles"] == row["compiles"] == len(row["points"])


def test_the_baseline_keeps_the_frontier_and_a_lower_one_is_a_regression(in_assets: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "fit-baseline.json"
    saved = _fit("fit_steps.py:stencil", *SEARCH, "--save-baseline", str(baseline))
    assert saved.exit_code == 0, saved.output + saved.stderr
    assert json.loads(baseline.read_text())["searches"][0]["rows"][0]["largest"] == 288
    same = _fit("fit_steps.py:stencil", *SEARCH, "--baseline", str(baseline))
    assert same.exit_code == 0 and "the frontier is where it was" in _words(same.stdout)
    # a baseline whose frontier was higher than the step's is now: the run regressed
    higher = json.loads(baseline.read_text())
    higher["searches"][0]["rows"][0]["largest"] = 312
    edited = tmp_path / "higher.json"
    edited.write_text(json.dumps(higher))
    regressed = _fit("fit_steps.py:stencil", *SEARCH, "--baseline", str(edited), "--save-baseline", str(baseline))
    assert regressed.exit_code == 1
    assert "regression: the largest n that fits went from 312 to 288" in _words(regressed.stdout)
    assert "was not saved: the run did not pass" in regressed.stderr
    other = _fit("fit_steps.py:stencil_keeping_history", *SEARCH, "--baseline", str(baseline), "--budget", "1")
    assert other.exit_code == 0 and "no entry for this search" in _words(other.stdout)  # another step


def test_compare_shows_two_fit_documents_side_by_side(in_assets: Path, tmp_path: Path) -> None:
    done = _fit("fit_steps.py:stencil", *SEARCH, "-f", "json", "-o", str(tmp_path / "main.json"))
    assert done.exit_code == 0, done.output + done.stderr
    branch = json.loads((tmp_path / "main.json").read_text())  # the same step after a change: 8 lower
    branch["searches"][0]["rows"][0].update(largest=280, smallest_failing=288)
    (tmp_path / "branch.json").write_text(json.dumps(branch))
    same = runner.invoke(app, ["compare", str(tmp_path / "main.json"), str(tmp_path / "main.json"), "--fail-on-diff"])
    assert same.exit_code == 0, same.output
    assert "no frontier moved" in same.stdout
    moved = runner.invoke(
        app, ["compare", str(tmp_path / "main.json"), str(tmp_path / "branch.json"), "--fail-on-diff"]
    )
    assert moved.exit_code == 1, moved.output
    assert "1 frontier moved" in moved.stdout and "280 ≠" in moved.stdout
    mixed = runner.invoke(app, ["compare", str(tmp_path / "main.json"), str(in_assets / "fit_steps.py")])
    assert mixed.exit_code == 2 and "is not a fieldmem fit document" in mixed.stderr


def test_a_bare_fit_runs_the_searches_of_the_config(in_assets: Path, tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text(
        "[tool.fieldmem]\n\n[[tool.fieldmem.fit]]\n"
        f'target = "{in_assets / "fit_steps.py"}:stencil"\n'
        'args = "fit_steps:make_grid"\n'
        'vary = { n = "224..320:8" }\n'
        'max-peak = "1MiB"\n'
        "at-least = { n = 300 }\n"
    )
    done = _fit("--config", str(config))
    assert done.exit_code == 1, done.output + done.stderr
    assert "✗ at-least: the largest n that fits is 288, below the floor of 300" in _words(done.stdout)
    over = _fit("--config", str(config), f"{in_assets / 'fit_steps.py'}:stencil", "--at-least", "n=256")
    assert over.exit_code == 0, over.output + over.stderr  # the command line's floor over the table's


def test_mistakes_are_one_line_and_exit_2(in_assets: Path) -> None:
    for args, says in (
        (
            ["fit_steps.py:stencil", "--args", "fit_steps:make_grid", "--vary", "size=8..64"],
            "has no parameter 'size' to vary (it takes n)",
        ),
        (["fit_steps.py:stencil", "--vary", "n=8..64:0"], "the step must be at least 1"),
        (["fit_steps.py:stencil", "--args", "fit_steps:make_grid", "--vary", "n=8..64"], "cannot tell whether it fits"),
        (
            ["fit_steps.py:stencil", "--args", "fit_steps:make_grid", "--vary", "n=8..64", "--at-least", "n=100"],
            "above the range",
        ),
    ):
        done = _fit(*args)
        assert done.exit_code == 2, (args, done.output)
        line = done.stderr.strip().splitlines()[0]
        assert line.startswith("fieldmem: error:") and says in line, (args, done.stderr)


def test_expect_fits_and_suggest_compile_the_factorys_defaults(in_assets: Path) -> None:
    done = _fit("fit_steps.py:stencil", *SEARCH, "--expect", "fits", "--suggest", "--donate", "none", "--budget", "4")
    assert done.exit_code == 0, done.output + done.stderr
    assert "✓ expect-fits: fits at the factory's defaults" in done.stdout
    assert "what --suggest verified at the factory's defaults" in done.stdout  # u, not --donate none


# ---- the pytest fixture -----------------------------------------------------------------------------

pytest_plugins = ["pytester"]

TESTS = """
import fit_steps

SEARCH = dict(vary={"n": "224..320:8"}, max_peak="1MiB")

def test_the_frontier_holds(fieldmem_fit):
    report = fieldmem_fit(fit_steps.stencil, fit_steps.make_grid, at_least={"n": 256}, **SEARCH)
    assert report.searches[0].rows[0].largest == 288

def test_a_change_lowers_it_below_the_floor(fieldmem_fit):
    fieldmem_fit(fit_steps.stencil_keeping_history, fit_steps.make_grid, at_least={"n": 256}, **SEARCH)
"""


def test_the_fixture_fails_a_test_whose_frontier_is_below_its_floor(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(fit_steps=(ASSETS / "fit_steps.py").read_text(), test_fit_floor=TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*at-least: the largest n that fits is 248, below the floor of 256*"])
    assert "Traceback" not in result.stdout.str()


def test_the_api_refuses_what_it_cannot_use(fit_steps: Any) -> None:
    with pytest.raises(fieldmem.FieldmemError, match="take a mapping or a list"):
        fieldmem.fit(fit_steps.stencil, fit_steps.make_grid, vary="n=1..8")
    with pytest.raises(fieldmem.FitError) as raised:
        fieldmem.assert_fits(
            fit_steps.stencil, fit_steps.make_grid, vary={"n": "224..320:8"}, max_peak="1MiB", at_least={"n": 300}
        )
    assert "at-least: the largest n that fits is 288, below the floor of 300" in str(raised.value)
    assert sys.modules.get("jax") is not None
