"""Option values parsed from strings: sizes, shapes, donation and static arguments."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.model.units import format_bytes, parse_bytes
from fieldmem.request.spec import DonateSpec, StaticSpec, parse_shapes

# ---- sizes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1048576", 1048576),
        ("64MiB", 64 * 1024**2),
        ("64mib", 64 * 1024**2),
        (" 64 MiB ", 64 * 1024**2),
        ("512KiB", 512 * 1024),
        ("512Ki", 512 * 1024),
        ("2GB", 2_000_000_000),
        ("1.5GB", 1_500_000_000),
        ("4.1MB", 4_100_000),  # exact, not 4099999 from float rounding
        ("1.1KiB", 1126),  # rounded down to whole bytes
        (".5KiB", 512),
        ("10b", 10),
        ("3k", 3000),
        ("1TiB", 1024**4),
        (1234, 1234),
        (0, 0),
    ],
)
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "64XB", "1e6", "5.", "-1", "--1", "64 Mi B", "MiB", "1,000"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(OptionError, match=re.escape("e.g. 64MiB")):
        parse_bytes(text)


@pytest.mark.parametrize("value", [-1, True, 1.5, None, [1]])
def test_parse_bytes_rejects_non_sizes(value: object) -> None:
    with pytest.raises(OptionError):
        parse_bytes(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [10**30, 2**63, "100000000TB", "9300000000000000000"])
def test_a_size_no_device_has_is_refused(value: int | str) -> None:
    """Issue 29, item 7: ``min_bytes=10**30`` in the plugin silently turned off the in-place check (every
    finding below it); a budget that large would turn off its gate. The largest real size passes."""
    with pytest.raises(OptionError, match=r"more than any device holds"):
        parse_bytes(value, "min_bytes=")
    assert parse_bytes(2**63 - 1) == 2**63 - 1


def test_parse_bytes_names_the_option() -> None:
    with pytest.raises(OptionError) as info:
        parse_bytes("lots", "--max-peak")
    assert info.value.message.startswith("--max-peak 'lots' is not understood")
    with pytest.raises(OptionError) as info:
        parse_bytes(-5, "max_peak=")
    assert info.value.message.startswith("max_peak=-5 is negative")
    with pytest.raises(OptionError, match=r"0 or more bytes"):
        parse_bytes("-1", "--min-bytes")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "n/a"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (-1536, "-1.5 KiB"),
        (64 * 1024**2, "64.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
        (3 * 1024**5, "3072.0 TiB"),
    ],
)
def test_format_bytes(value: int | None, expected: str) -> None:
    assert format_bytes(value) == expected


@pytest.mark.parametrize("value", [0, 1, 1000, 4096, 12345, 64 * 1024**2])
def test_format_then_parse_is_close(value: int) -> None:
    text = format_bytes(value).replace(" ", "")
    assert abs(parse_bytes(text) - value) <= max(1, value // 100)


# ---- shapes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("f32[4096,4096] f32[4096]", (("float32", (4096, 4096)), ("float32", (4096,)))),
        ("f32[32,32]", (("float32", (32, 32)),)),
        ("s32[]", (("int32", ()),)),
        ("bf16[8];u8[2]", (("bfloat16", (8,)), ("uint8", (2,)))),
        ("F32[3] BF16[2]", (("float32", (3,)), ("bfloat16", (2,)))),
        ("float32[3]", (("float32", (3,)),)),
        ("pred[4] c64[1] i64[0]", (("bool", (4,)), ("complex64", (1,)), ("int64", (0,)))),
        ("  f32[2, 3]   s32[ 4 ] ", (("float32", (2, 3)), ("int32", (4,)))),
        ("f32 [2,3]", (("float32", (2, 3)),)),
    ],
)
def test_parse_shapes(text: str, expected: tuple) -> None:
    assert parse_shapes(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("   ; ", "is empty"),
        ("f32[32,32", "is not DTYPE[DIMS]"),
        ("f32", "is not DTYPE[DIMS]"),
        ("f32(3)", "is not DTYPE[DIMS]"),
        ("f32[3]x", "is not DTYPE[DIMS]"),
        ("f32[-1]", "is not DTYPE[DIMS]"),
        ("f32[3,,4]", "is not DTYPE[DIMS]"),
        ("f32[,]", "is not DTYPE[DIMS]"),
        ("f32[3,]", "is not DTYPE[DIMS]"),
        ("f32[a]", "is not DTYPE[DIMS]"),
        ("[3]", "is not DTYPE[DIMS]"),
        ("q7[32]", "unknown dtype 'q7'; known: bf16, bool"),
        ("f32[2] float99[1]", "unknown dtype 'float99'"),
    ],
)
def test_parse_shapes_rejects(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=r"^--shapes") as info:
        parse_shapes(text)
    assert message in info.value.message
    assert "\n" not in info.value.message


# ---- donation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "mode", "items"),
    [
        (None, "auto", ()),
        ("auto", "auto", ()),
        ("all", "all", ()),
        (" ALL ", "all", ()),
        ("none", "none", ()),
        ("None", "none", ()),
        ("0,2", "list", (0, 2)),
        ("0, 2", "list", (0, 2)),
        ("params,opt_state", "list", ("params", "opt_state")),
        ("0,u", "list", (0, "u")),
        ("u,", "list", ("u",)),
        (0, "list", (0,)),
        (3, "list", (3,)),
        ((0, 2), "list", (0, 2)),
        ([0, "u"], "list", (0, "u")),
        (("u",), "list", ("u",)),
        ((), "none", ()),
        ([], "none", ()),
    ],
)
def test_donate_spec(value: object, mode: str, items: tuple) -> None:
    spec = DonateSpec.parse(value)  # type: ignore[arg-type]
    assert (spec.mode, spec.items) == (mode, items)
    assert DonateSpec.parse(spec) is spec


@pytest.mark.parametrize(
    ("spec", "text"),
    [(DonateSpec(), "auto"), (DonateSpec("none"), "none"), (DonateSpec("list", (0, "u")), "0,u")],
)
def test_donate_describe(spec: DonateSpec, text: str) -> None:
    assert spec.describe() == text
    assert DonateSpec.parse(text) == spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "is empty: use one of auto, all, none"),
        (" , ", "is empty"),
        ("-1", "argument numbers start at 0"),
        ("0,-2", "argument numbers start at 0"),
        (-1, "argument numbers start at 0"),
        ((0, -1), "argument numbers start at 0"),
        ("0.5", "neither an argument number nor an argument name"),
        ("a b", "neither an argument number nor an argument name"),
        ("u-v", "neither an argument number nor an argument name"),
        ([True], "neither an argument number nor an argument name"),
        ([1.5], "neither an argument number nor an argument name"),
        (True, "is not understood: use 'all', 'none'"),
        (1.5, "is not understood"),
        ({"u"}, "is not understood"),
    ],
)
def test_donate_spec_rejects(value: object, message: str) -> None:
    with pytest.raises(OptionError) as info:
        DonateSpec.parse(value)  # type: ignore[arg-type]
    assert message in info.value.message
    assert info.value.message.startswith("--donate")


def test_donate_spec_names_an_api_argument() -> None:
    with pytest.raises(OptionError) as info:
        DonateSpec.parse("sometimes!", "donate=")
    assert info.value.message.startswith("donate='sometimes!'")


@pytest.mark.parametrize(
    ("value", "items"),
    [
        (None, ()),
        ("", ()),
        ("2,3", (2, 3)),
        ("n_steps", ("n_steps",)),
        ("2, n_steps", (2, "n_steps")),
        (2, (2,)),
        ((2, "dt"), (2, "dt")),
        ([], ()),
    ],
)
def test_static_spec(value: object, items: tuple) -> None:
    spec = StaticSpec.parse(value)  # type: ignore[arg-type]
    assert spec.items == items
    assert StaticSpec.parse(spec) is spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "argument numbers start at 0"),
        (-3, "argument numbers start at 0"),
        ([0, -3], "argument numbers start at 0"),
        ("2;3", "neither an argument number nor an argument name"),
        ([False], "neither an argument number nor an argument name"),
        (2.0, "is not understood: use argument numbers or names"),
    ],
)
def test_static_spec_rejects(value: object, message: str) -> None:
    with pytest.raises(OptionError) as info:
        StaticSpec.parse(value)  # type: ignore[arg-type]
    assert message in info.value.message
    assert info.value.message.startswith("--static")


def test_option_error_is_a_user_error() -> None:
    error = OptionError("--donate 'x' is bad")
    assert isinstance(error, FieldmemError)
    assert error.exit_code == 2
    assert str(error) == error.message == "--donate 'x' is bad"


def test_spec_imports_no_jax() -> None:
    code = "import sys, fieldmem.request.spec, fieldmem.request.registry, fieldmem.request.target; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
