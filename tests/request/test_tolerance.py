"""Tolerances: parsed once from text, then asked whether a growth is allowed (pure, no jax)."""

from __future__ import annotations

import pytest

from fieldmem.model.errors import OptionError
from fieldmem.request.tolerance import COPIES, FIGURES, GROUPS, Tolerance, Tolerances

MIB = 1024 * 1024


def test_the_default_is_exact() -> None:
    tolerances = Tolerances()
    for field in FIGURES.values():
        tolerance = tolerances.for_figure(field)
        assert tolerance.allows(1000, 1000)
        assert not tolerance.allows(1000, 1001)
        assert tolerance.allows(1000, 999)  # shrinking is never a regression
    assert tolerances.describe() == "exact"
    assert Tolerances.parse("0") == Tolerances()


@pytest.mark.parametrize(
    ("text", "before", "limit"),
    [
        ("2%", 1000, 1020),  # 2% of 1000 is exactly 20, not 19 after float rounding
        ("2%", 999, 1018),  # floor(19.98) = 19
        ("0.5%", 1000, 1005),
        ("1MiB", 10, 10 + MIB),
        ("4096", 0, 4096),
        ("5%+1MiB", 1000, 1000 + 50 + MIB),  # the two allowances add up
        ("1MiB+5%", 1000, 1000 + 50 + MIB),
        ("100%", 7, 14),
    ],
)
def test_both_sides_of_each_limit(text: str, before: int, limit: int) -> None:
    tolerance = Tolerances.parse(text).default
    assert tolerance.allows(before, limit)
    assert not tolerance.allows(before, limit + 1)
    assert tolerance.allowance(before) == limit - before


def test_named_figures_and_the_peak_group() -> None:
    tolerances = Tolerances.parse("peak:5%,temp:1MiB")
    for name in GROUPS["peak"]:
        assert tolerances.for_figure(FIGURES[name]) == Tolerance(relative=0.05)
    assert tolerances.for_figure("temp_bytes") == Tolerance(absolute=MIB)
    assert tolerances.for_figure(COPIES) == Tolerance()  # not named: the default, exact
    assert tolerances.for_figure("temp_bytes").allows(0, MIB)
    assert not tolerances.for_figure("temp_bytes").allows(0, MIB + 1)


def test_a_default_next_to_named_figures() -> None:
    tolerances = Tolerances.parse("1%, copies:0, footprint:2%+64KiB")
    assert tolerances.default == Tolerance(relative=0.01)
    assert tolerances.for_figure(COPIES) == Tolerance()
    assert tolerances.for_figure("footprint_bytes") == Tolerance(relative=0.02, absolute=64 * 1024)
    assert tolerances.for_figure("live_peak_bytes") == Tolerance(relative=0.01)


@pytest.mark.parametrize("text", ["2%", "1MiB", "5%+1MiB", "peak:5%,temp:1MiB", "1%,copies:0", "0.25%,xla-peak:1000"])
def test_describe_parses_back(text: str) -> None:
    tolerances = Tolerances.parse(text)
    assert Tolerances.parse(tolerances.describe()) == tolerances


def test_describe_names_every_figure_of_a_group() -> None:
    assert Tolerances.parse("peak:5%").describe() == "live-peak:5%,footprint:5%,xla-peak:5%"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--tolerance '' is empty"),
        (" , ", "is empty"),
        ("lots", "'lots' is neither a percentage nor a size"),
        ("-2%", "'-2%' is neither a percentage nor a size (a tolerance is 0 or more)"),
        ("-1MiB", "(a tolerance is 0 or more)"),
        ("2%+3%", "'2%+3%' has two percentages"),
        ("1MiB+1KiB", "has two sizes"),
        ("peek:5%", "'peek' is not a figure: did you mean 'peak'?"),
        ("live_peak:5%", "did you mean 'live-peak'?"),
        ("temp:", "a name without an allowance"),
        ("2%,3%", "gives the default a second time"),
        ("peak:5%,footprint:1%", "'footprint' is given more than once"),
        ("temp:1MiB,temp:2MiB", "'temp' is given more than once"),
    ],
)
def test_bad_text_names_the_option_and_the_piece(text: str, message: str) -> None:
    with pytest.raises(OptionError) as error:
        Tolerances.parse(text)
    assert message in error.value.message
    assert error.value.message.startswith(f"--tolerance {text!r}")
    assert "\n" not in error.value.message


def test_the_option_name_is_the_callers() -> None:
    with pytest.raises(OptionError, match=r"^tolerance= 'x'"):
        Tolerances.parse("x", option="tolerance=")
