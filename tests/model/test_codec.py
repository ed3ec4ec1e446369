"""The JSON codec shared by the report and the baseline (no jax)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from fieldmem.model import word_sets
from fieldmem.model.codec import decode, encode, read_unknown_as, unknown_values
from fieldmem.model.errors import ReportError
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult

from factories import make_report


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


Status = Literal["ok", "error"]


@dataclass(frozen=True)
class WithWords:
    status: Status
    cause: Status | None = None


def test_literal_words_decode_and_a_word_outside_the_set_names_its_path() -> None:
    assert decode(WithWords, {"status": "ok", "cause": None}) == WithWords("ok")
    assert decode(tuple[WithWords, ...], [{"status": "error", "cause": "ok"}]) == (WithWords("error", "ok"),)
    with pytest.raises(ValueError, match=r"^\[1\]\.status should be one of 'ok', 'error', not str 'fine'$"):
        decode(tuple[WithWords, ...], [{"status": "ok"}, {"status": "fine"}])
    with pytest.raises(ValueError, match=r"^cause should be one of 'ok', 'error', not int 1$"):
        decode(WithWords, {"status": "ok", "cause": 1})


def test_a_report_with_an_unknown_status_is_refused_with_its_path() -> None:
    report = make_report((TargetResult(target="m:f", name="m:f", status="ok"),))
    document = report.to_dict()
    assert Report.from_dict(document) == report
    document["results"][0]["status"] = "skipped"
    with pytest.raises(ReportError) as caught:
        Report.from_dict(document)
    assert str(caught.value) == (
        "the report does not match fieldmem.report/2: "
        "results[0].status should be one of 'ok', 'error', not str 'skipped'"
    )


_QUOTED = (("`", "`"), ('"', '"'), ("| ", " |"))  # as code, as a JSON string, as a table cell
REPORT_SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


REPORT_WORDS = sorted(name for name, value in vars(word_sets).items() if get_origin(value) is Literal)


def test_the_report_defines_its_words_as_literals() -> None:
    assert {"TargetStatus", "CopyKind", "FindingCode", "ChainStepStatus"} <= set(REPORT_WORDS)


@pytest.mark.parametrize("words", REPORT_WORDS)
def test_every_word_the_codec_accepts_is_documented(words: str) -> None:
    text = REPORT_SCHEMA_DOC.read_text()
    allowed = get_args(getattr(word_sets, words))
    missing = [w for w in allowed if not any(f"{q}{w}{e}" in text for q, e in _QUOTED)]
    assert not missing, f"{words}: {missing} are not in docs/report-schema.md"


def _rich_report() -> Report:
    """A report with every kind of value the codec meets: records, words, unions, tuples, mappings, errors."""
    from factories import (
        make_copy,
        make_error_result,
        make_input,
        make_output,
        make_result,
        make_timeline,
        make_variant,
    )

    donated = make_variant("donated", copies=(make_copy(),), timeline=make_timeline((1, 5, 2)), lower_seconds=0.5)
    result = make_result(
        inputs=tuple(make_input(f"u{n}", n) for n in range(3)),
        outputs=tuple(make_output(f"out{n}", n) for n in range(3)),
        donated=donated,
    )
    return make_report((result, make_error_result(), TargetResult(target="m:g", name="m:g", status="ok")))


def test_msgspec_reads_a_whole_report_without_the_careful_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid document never falls back to the path-keeping reading (which is several times slower)."""
    import fieldmem.model.codec as codec

    report = _rich_report()
    document = report.to_dict()

    def refused(*args: object) -> None:
        raise AssertionError(f"the careful reading ran on a valid document: {args[0]!r}")

    monkeypatch.setattr(codec, "_decode", refused)
    assert Report.from_dict(document) == report
    assert decode(Outer, encode(Outer("a", (Inner(1, 0.5),), {"x": None}, 2))) == Outer(
        "a", (Inner(1, 0.5),), {"x": None}, 2
    )


def test_msgspec_and_the_careful_reading_agree_value_for_value() -> None:
    from fieldmem.model.codec import _decode

    document = _rich_report().to_dict()
    assert decode(Report, document) == _decode(Report, document)
    # ints where floats are declared become floats either way; bools are never ints
    assert decode(Inner, {"n": 1, "ratio": 2}) == _decode(Inner, {"n": 1, "ratio": 2}) == Inner(1, 2.0)
    assert type(decode(Inner, {"n": 1, "ratio": 2}).ratio) is float


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "items": [{"n": 2**63}]}, "items[0].n should be a 64-bit integer"),
        ({"name": "a", "items": [{"n": 1, "ratio": 10**400}]}, "items[0].ratio should be a number"),
    ],
)
def test_what_msgspec_accepts_and_the_codec_does_not_is_refused_with_its_path(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        decode(Outer, data)


def test_a_process_without_msgspec_writes_and_reads_the_same_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker under another interpreter has jax and the standard library only: the codec writes the same JSON
    and reads the same records there, bytes and sets included."""
    import json
    import sys

    from fieldmem.model.codec import dumps

    @dataclass(frozen=True)
    class Blob:
        data: bytes
        names: frozenset[str]
        inner: tuple[Inner, ...]

    value = Blob(b"\x00\xffhlo", frozenset({"a"}), (Inner(1, 0.5),))
    written = dumps(value)
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec raises ImportError
    monkeypatch.setitem(sys.modules, "msgspec.json", None)
    assert json.loads(dumps(value)) == json.loads(written) == encode(value)
    assert decode(Blob, json.loads(written)) == value


def test_free_text_with_a_lone_surrogate_reads_back_as_written() -> None:
    """JSON holds a lone surrogate as an escape and fieldmem writes one so (a case named so): it reads back,
    both ways of decoding alike; every output shows it escaped (fieldmem.model.escaping). A word never is one."""
    from fieldmem.model.codec import _decode

    data = {"name": "a\ud800", "by_name": {"\udcff": 1}, "either": "\udfff"}
    assert decode(Outer, data) == _decode(Outer, data) == Outer("a\ud800", (), {"\udcff": 1}, "\udfff")


def test_encode_reads_each_record_as_before() -> None:
    """Cached field names: a subclass of a record and a record class itself encode as they did."""

    @dataclass(frozen=True)
    class More(Inner):
        extra: str = "x"

    assert encode(More(1)) == {"n": 1, "ratio": 1.0, "extra": "x"}
    assert encode(Inner(2)) == {"n": 2, "ratio": 1.0}
    assert encode(Inner) is Inner
    assert encode({1: (Inner(3),)}) == {"1": [{"n": 3, "ratio": 1.0}]}


Open = Literal["a", "b", "other"]
read_unknown_as(Open, "other")


@dataclass(frozen=True)
class WithOpenWords:
    word: Open
    closed: Status = "ok"


def test_an_open_set_reads_a_word_it_does_not_know_as_its_stand_in_and_says_where() -> None:
    with unknown_values() as found:
        decoded = decode(tuple[WithOpenWords, ...], [{"word": "a"}, {"word": "zeta"}])
    assert decoded == (WithOpenWords("a"), WithOpenWords("other"))
    assert found == [("[1].word", "zeta", "other")]
    assert decode(WithOpenWords, {"word": "zeta"}) == WithOpenWords("other")  # not collecting: read all the same
    with pytest.raises(ValueError, match=r"^closed should be one of 'ok', 'error', not str 'zeta'$"):
        decode(WithOpenWords, {"word": "a", "closed": "zeta"})  # a closed set still refuses
    with pytest.raises(ValueError, match=r"word should be one of 'a', 'b', 'other', not int 3"):
        decode(WithOpenWords, {"word": 3})  # only a word stands for a word
    with pytest.raises(ValueError, match="lone surrogate"):
        decode(WithOpenWords, {"word": "\ud800"})
    with pytest.raises(ValueError, match="'nothing' is not one of"):
        read_unknown_as(Open, "nothing")


def test_builtins_is_encode_for_a_json_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report renderer's walk in C gives the text :func:`encode`'s document gives, bytes, sets and lone
    surrogates included, and is :func:`encode` itself without msgspec."""
    import json
    import sys

    from fieldmem.model.codec import builtins

    @dataclass(frozen=True)
    class Blob:
        data: bytes
        names: frozenset[str]
        inner: tuple[Inner, ...]
        by_number: dict[int, str]

    values = [_rich_report(), Blob(b"\x00\xffhlo", frozenset({"a"}), (Inner(1, 0.5),), {3: "x\ud800"})]
    for value in values:
        assert json.dumps(builtins(value)) == json.dumps(encode(value))
    monkeypatch.setitem(sys.modules, "msgspec", None)
    for value in values:
        assert builtins(value) == encode(value)
