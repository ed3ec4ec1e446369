"""``fieldmem.check_function`` and ``fieldmem.assert_in_place`` on real compiles.

An in-place update passes; the same update without donation raises
:class:`fieldmem.NotInPlaceError` whose message is the CLI's verdict with the
source line; each budget is tried at its exact limit and one byte under it,
on a function whose footprint and live peak differ, so that a budget read
from the wrong figure fails here. Arrays are 64x64 f32 (16 KiB).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import fieldmem
from fieldmem.frontends.api import combine_reports, failure_message
from fieldmem.model.errors import CompileError, DonationError, FieldmemError, OptionError
from fieldmem.model.report import Report
from fieldmem.render import RenderOptions, get_renderer

N = 64
HERE = os.path.basename(__file__)


def line_of(fn: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def add_row(u, f):
    return u.at[0].add(f)


def loop_rows(u):
    # in place with donation, and its footprint (which counts the loop's small
    # temporaries all at once) is larger than its live peak
    return jax.lax.fori_loop(0, 4, lambda i, x: x.at[i].add(1.0), u)


def scaled(u, *, scale):
    return u.at[1].mul(scale)


def fails_to_trace(u):
    return u @ jnp.zeros((3, 5))


@pytest.fixture(scope="module")
def field() -> jax.Array:
    return jnp.zeros((N, N), jnp.float32)


# ----------------------------------------------------------------------------
# Options are checked before anything compiles (no compile marker)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_peak": "lots"}, "max_peak='lots' is not understood"),
        ({"max_footprint": "lots"}, "max_footprint='lots' is not understood"),
        ({"max_live_peak": -1}, "max_live_peak=-1 is negative"),
        ({"min_bytes": "1 parsec"}, "min_bytes='1 parsec' is not understood"),
        ({"donate": 1.5}, "donate=1.5 is not understood"),
        ({"static": -2}, "static=-2: argument numbers start at 0"),
    ],
)
def test_bad_option_is_an_option_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        fieldmem.assert_in_place(add_row, None, 1.0, **options)


def test_bad_expect_and_non_callable() -> None:
    with pytest.raises(OptionError, match="expect='in place' is not known: use one of in-place, fits, any"):
        fieldmem.check_function(add_row, None, 1.0, expect="in place")
    with pytest.raises(OptionError, match="int is not callable"):
        fieldmem.check_function(3, None)


# ----------------------------------------------------------------------------
# In place with donation, and not without it


@pytest.mark.compile
@pytest.mark.parametrize("fast", [True, False])
def test_assert_in_place_compiles_as_its_fast_compile_says(field: jax.Array, fast: bool) -> None:
    (result,) = fieldmem.assert_in_place(add_row, field, 1.0, fast_compile=fast).results
    assert {name: variant.fast_compile for name, variant in result.variants.items()} == {"plain": fast, "donated": fast}


@pytest.mark.compile
def test_in_place_with_donation_passes(field: jax.Array) -> None:
    report = fieldmem.assert_in_place(add_row, field, 1.0)
    assert isinstance(report, Report) and report.exit_code == 0
    (result,) = report.results
    assert result.verdict is not None and result.verdict.in_place
    assert [(c.name, c.passed) for c in result.checks] == [("expect-in-place", True)]
    assert [(a.input, a.output) for a in result.variants["donated"].aliases] == [("u", "out")]
    assert result.name == f"{__name__}:add_row"
    assert result.definition is not None and result.definition.endswith(f"{HERE}:{line_of(add_row, 'def add_row')}")


@pytest.mark.compile
def test_without_donation_raises_the_cli_verdict(field: jax.Array) -> None:
    with pytest.raises(fieldmem.NotInPlaceError) as caught:
        fieldmem.assert_in_place(add_row, field, 1.0, donate="none", name="model:add_row")
    error = caught.value
    assert isinstance(error, AssertionError)
    (result,) = error.report.results
    assert result.verdict is not None and not result.verdict.in_place
    message = str(error)
    # first line: the verdict, which names the line and the fix
    assert message.splitlines()[0] == f"model:add_row: {result.verdict.summary}"
    assert "not in place" in message.splitlines()[0]
    source = f"{HERE}:{line_of(add_row, 'u.at[0].add(f)')}"
    assert any(f.code == "parameter-copy" and f.source and f.source.endswith(source) for f in result.verdict.findings)
    assert f"u is not donated and is copied (16.0 KiB) at tests/frontends/{source}: donate it" in message
    # the rest is the table renderer's text for this report, nothing added
    table = get_renderer("table").render(error.report, RenderOptions(min_bytes=1024, width=160)).rstrip()
    assert message.endswith("\n" + table)


@pytest.mark.compile
def test_check_function_reports_without_asserting(field: jax.Array) -> None:
    report = fieldmem.check_function(add_row, field, 1.0, donate="none")
    (result,) = report.results
    assert result.verdict is not None and not result.verdict.in_place
    assert result.checks == () and report.exit_code == 0
    expected = fieldmem.check_function(add_row, field, 1.0, donate="none", expect="in-place")
    assert expected.exit_code == 1
    assert [c.name for c in expected.results[0].failed_checks] == ["expect-in-place"]


@pytest.mark.compile
def test_min_bytes_decides_what_counts(field: jax.Array) -> None:
    # the 16 KiB copy made without donation is below a 32 KiB threshold
    report = fieldmem.assert_in_place(add_row, field, 1.0, donate="none", min_bytes="32KiB")
    assert report.min_bytes == 32 * 1024
    with pytest.raises(fieldmem.NotInPlaceError):
        fieldmem.assert_in_place(add_row, field, 1.0, donate="none", min_bytes=16 * 1024)


# ----------------------------------------------------------------------------
# Budgets, on both sides of each limit


@pytest.fixture(scope="module")
def loop_figures(field: jax.Array) -> tuple[int, int]:
    """(footprint_bytes, live_peak_bytes) of loop_rows's donated variant, footprint > live peak."""
    memory = fieldmem.check_function(loop_rows, field).results[0].variants["donated"].memory
    footprint, live_peak = memory.footprint_bytes, memory.live_peak_bytes
    assert footprint is not None and live_peak is not None
    assert footprint > live_peak, "the budget tests need a function whose two figures differ"
    return footprint, live_peak


@pytest.mark.compile
def test_max_peak_budgets_the_footprint(field: jax.Array, loop_figures: tuple[int, int]) -> None:
    footprint, live_peak = loop_figures
    report = fieldmem.assert_in_place(loop_rows, field, max_peak=footprint)
    assert [(c.name, c.passed, c.value, c.limit) for c in report.results[0].checks][-1] == (
        "max-footprint",
        True,
        footprint,
        footprint,
    )
    # one byte under: fails, although the live peak would fit
    assert live_peak <= footprint - 1
    with pytest.raises(fieldmem.NotInPlaceError) as caught:
        fieldmem.assert_in_place(loop_rows, field, max_peak=f"{footprint - 1}B")
    failed = caught.value.report.results[0].failed_checks
    assert [(c.name, c.value, c.limit) for c in failed] == [("max-footprint", footprint, footprint - 1)]
    assert str(caught.value).splitlines()[0] == f"{__name__}:loop_rows: max-footprint: {failed[0].message}"


@pytest.mark.compile
def test_max_live_peak_budgets_the_live_peak(field: jax.Array, loop_figures: tuple[int, int]) -> None:
    _, live_peak = loop_figures
    # at the limit: passes, although the footprint is over it
    report = fieldmem.assert_in_place(loop_rows, field, max_live_peak=live_peak)
    check = report.results[0].checks[-1]
    assert (check.name, check.passed, check.value, check.limit) == ("max-live-peak", True, live_peak, live_peak)
    assert check.message.startswith("donated live peak") and "within the budget" in check.message
    with pytest.raises(fieldmem.NotInPlaceError) as caught:
        fieldmem.assert_in_place(loop_rows, field, max_live_peak=live_peak - 1)
    (failed,) = caught.value.report.results[0].failed_checks
    assert (failed.name, failed.value, failed.limit) == ("max-live-peak", live_peak, live_peak - 1)
    assert "exceeds the budget" in failed.message
    assert f"✗ max-live-peak: {failed.message}" in str(caught.value)


@pytest.mark.compile
def test_size_strings_are_parsed(field: jax.Array) -> None:
    report = fieldmem.assert_in_place(add_row, field, 1.0, max_peak="1MiB", max_live_peak="64KiB")
    assert {c.name: c.limit for c in report.results[0].checks} == {
        "expect-in-place": None,
        "max-footprint": 1024**2,
        "max-live-peak": 64 * 1024,
    }
    with pytest.raises(fieldmem.NotInPlaceError) as caught:
        fieldmem.assert_in_place(add_row, field, 1.0, max_peak="1KiB", max_live_peak="1KiB")
    assert [c.name for c in caught.value.report.results[0].failed_checks] == ["max-footprint", "max-live-peak"]


# ----------------------------------------------------------------------------
# Arguments: ShapeDtypeStructs, keywords, jit objects


@pytest.mark.compile
def test_shape_dtype_struct_arguments() -> None:
    spec = jax.ShapeDtypeStruct((N, N), jnp.float32)
    report = fieldmem.assert_in_place(scaled, spec, scale=jax.ShapeDtypeStruct((), jnp.float32))
    (result,) = report.results
    assert [(i.path, i.shape, i.dtype) for i in result.inputs] == [("u", (N, N), "float32"), ("scale", (), "float32")]
    assert [(a.input, a.output) for a in result.variants["donated"].aliases] == [("u", "out")]


@pytest.mark.compile
def test_a_jit_objects_own_donation_is_the_donated_variant(field: jax.Array) -> None:
    jitted = jax.jit(add_row, donate_argnums=0)
    report = fieldmem.assert_in_place(jitted, field, 1.0)
    assert report.results[0].donate == "jit"
    assert report.results[0].name == f"{__name__}:add_row"
    assert not field.is_deleted()  # compiled, never run


@pytest.mark.compile
def test_user_mistakes_raise_the_checkers_error(field: jax.Array) -> None:
    with pytest.raises(DonationError, match="add_row") as caught:
        fieldmem.assert_in_place(add_row, field, 1.0, donate="params")
    assert not isinstance(caught.value, AssertionError)
    with pytest.raises(CompileError, match="fails_to_trace"):
        fieldmem.check_function(fails_to_trace, field)


# ----------------------------------------------------------------------------
# Messages and session reports are made of the reports, nothing else


@pytest.mark.compile
def test_combine_reports_keeps_every_result(field: jax.Array) -> None:
    one = fieldmem.check_function(add_row, field, 1.0, name="a")
    two = fieldmem.check_function(add_row, field, 1.0, donate="none", expect="in-place", name="b")
    combined = combine_reports([one, two], min_bytes=512)
    assert [r.name for r in combined.results] == ["a", "b"]
    assert (combined.backend, combined.jax_version, combined.devices) == (one.backend, one.jax_version, one.devices)
    assert combined.min_bytes == 512 and combined.exit_code == 1
    assert Report.from_dict(combined.to_dict()) == combined
    lines = failure_message(combined).splitlines()
    assert lines[0].startswith("b: not in place") and lines[1].startswith("fieldmem ")
    empty = combine_reports([], min_bytes=1024)
    assert empty.results == () and empty.backend == one.backend


def test_errors_are_fieldmem_errors_and_exported() -> None:
    assert issubclass(fieldmem.NotInPlaceError, AssertionError)
    assert not issubclass(fieldmem.NotInPlaceError, FieldmemError)
    assert {"assert_in_place", "check_function", "NotInPlaceError"} <= set(fieldmem.__all__)


@pytest.mark.compile
def test_the_footprint_budget_has_one_name_and_takes_its_older_one(field: jax.Array) -> None:
    """The three peaks have three names (issue 48): ``max_footprint`` budgets the footprint, ``max_peak`` is its
    older name, still taken, and the two at once are refused."""
    report = fieldmem.check_function(loop_rows, field, max_footprint="1B")
    older = fieldmem.check_function(loop_rows, field, max_peak="1B")
    for checked in (report, older):
        (check,) = checked.results[0].failed_checks
        assert check.name == "max-footprint" and check.message.startswith("donated footprint "), check
    with pytest.raises(OptionError, match="max_footprint= and max_peak= are one budget"):
        fieldmem.check_function(loop_rows, field, max_footprint="1MiB", max_peak="1MiB")
