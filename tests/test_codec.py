"""The JSON codec shared by the report and the baseline (no jax)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fieldmem.codec import decode, encode


@dataclass(frozen=True)
class Inner:
    n: int
    ratio: float = 1.0


@dataclass(frozen=True)
class Outer:
    name: str
    items: tuple[Inner, ...] = ()
    by_name: dict[str, int | None] | None = None
    either: int | str | None = None


def test_round_trip() -> None:
    value = Outer("a", (Inner(1, 0.5), Inner(2)), {"x": 1, "y": None}, "s")
    assert decode(Outer, encode(value)) == value


def test_defaults_unknown_keys_and_ints_as_floats() -> None:
    assert decode(Outer, {"name": "a", "future": 1, "items": [{"n": 3, "ratio": 2}]}) == Outer("a", (Inner(3, 2.0),))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "items": [{"n": 1}, {"n": "2"}]}, "items[1].n should be int, not str '2'"),
        ({"name": "a", "items": [{"n": True}]}, "items[0].n should be int, not bool True"),
        ({"name": "a", "items": {}}, "items should be a list, not dict"),
        ({"name": "a", "by_name": {"x": "1"}}, "by_name.x should be int, not str '1'"),
        ({"name": "a", "either": 1.5}, "either should be one of int, str, not float 1.5"),
    ],
)
def test_a_wrong_type_names_its_path(data: dict, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        decode(Outer, data)
    assert str(caught.value) == message


def test_a_missing_field_names_its_path() -> None:
    with pytest.raises(KeyError, match=r"items\[0\]\.n is missing"):
        decode(Outer, {"name": "a", "items": [{}]})


def test_fixed_length_tuples_decode_item_by_item() -> None:
    """``TargetOptions.shapes`` (tuple[tuple[str, tuple[int, ...]], ...]) goes to a --run worker and back."""
    from fieldmem.request.target import TargetOptions

    options = TargetOptions(shapes=(("f32", (512, 512)), ("bf16", (8,))), expect="in-place")
    assert decode(TargetOptions, encode(options)) == options
    with pytest.raises(TypeError, match=r"shapes\[0\] should have 2 items, not 3"):
        decode(TargetOptions, {"shapes": [["f32", [1], "extra"]]})
