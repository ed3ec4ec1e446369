"""Per-leaf work done once: what the faster paths read is what the careful ones read.

A pytree of thousands of leaves is read leaf by leaf in many places (the
arguments' paths, the outputs, bytes per shape, the buffer assignment). Each
shortcut here is checked against an independent reading: hand-computed
bytes, the arguments' own paths, jax's own outputs.
"""

from __future__ import annotations

import gc
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from fieldmem.driver import prepare_call, start_variants
from fieldmem.driver.shapes import dtype_name, shape_bytes
from fieldmem.request.spec import DonateSpec, StaticSpec

from helpers_compile import make_target


@pytest.mark.parametrize(
    ("shape", "dtype", "size", "name"),
    [
        ((8, 8), np.float32, 256, "float32"),
        ((3,), jnp.bfloat16, 6, "bfloat16"),
        ((5,), jnp.int4, 3, "int4"),  # packed two to a byte, rounded up
        ((9,), ml_dtypes.float4_e2m1fn, 5, "float4_e2m1fn"),
        ((), np.bool_, 1, "bool"),
        ((3, 3), "float16", 18, "float16"),
        ((0, 2**62, 8), np.float64, 0, "float64"),
        # 2**80 elements: XLA's int64 product wraps to 0, and so does the report's (as before)
        ((2**40, 2**40), np.float32, 0, "float32"),
        ((2**31, 2**31), np.int8, 2**62, "int8"),
    ],
)
def test_bytes_and_names_of_shapes_twice_over(shape: tuple[int, ...], dtype: object, size: int, name: str) -> None:
    """Read twice: the second reading comes from what the first learnt of the dtype."""
    for _ in range(2):
        assert shape_bytes(shape, dtype) == size
        assert dtype_name(dtype) == name


def test_an_extended_dtype_is_its_physical_bytes() -> None:
    key = jax.random.key(0).dtype  # key<fry>: two uint32
    assert [shape_bytes((4,), key), shape_bytes((4,), key)] == [32, 32]
    assert dtype_name(key) == "key<fry>"


def _call(state: dict[str, jax.Array]) -> object:
    def update(state: dict[str, jax.Array], w: jax.Array) -> dict[str, jax.Array]:
        return {k: v * w for k, v in state.items()}

    return prepare_call(update, (state, jnp.ones((2,))), {}, donate=DonateSpec(), static=StaticSpec())


@pytest.mark.compile
def test_each_call_reads_its_own_leaves_and_only_the_donated_variant_hands_on_outputs() -> None:
    """Two calls one after the other (the flattening of a call is kept for its second variant): each
    variant's inputs are its own call's leaves, in jax's order, and the donated variant's outputs are
    the program's outputs as jax gives them."""
    first = {f"leaf{i}": jnp.full((2,), float(i)) for i in range(12)}
    second = {"b": jnp.zeros((3, 2)), "a": jnp.zeros((2,))}
    for state in (first, second, first):
        call = _call(state)
        plain, donated = start_variants(call, None).result()
        expected = [f"state['{k}']" for k in sorted(state)] + ["w"]  # a dict's leaves in key order, then w
        for variant in (plain.variant, donated.variant):
            assert [leaf.path for leaf in variant.inputs] == expected
            assert [leaf.index for leaf in variant.inputs] == list(range(len(expected)))
            assert [leaf.bytes for leaf in variant.inputs] == [4 * state[k].size for k in sorted(state)] + [8]
        assert [leaf.donated for leaf in donated.variant.inputs] == [True] * len(expected)
        assert plain.outputs is None
        assert "outputs" not in vars(donated)  # built only when a chain asks for them
        reference = jax.eval_shape(call.function, *call.args)
        assert jax.tree_util.tree_structure(donated.outputs) == jax.tree_util.tree_structure(reference)
        assert [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(donated.outputs)] == [
            (s.shape, s.dtype) for s in jax.tree_util.tree_leaves(reference)
        ]


@pytest.mark.compile
def test_the_donated_variant_takes_the_plain_ones_output_leaves_only_where_they_are_its_own() -> None:
    """Donation changes no output's path, shape or dtype: the donated variant takes the plain one's leaves
    (the same tuple) where its output tree and compiled formats are the same, and reads its own otherwise."""
    import dataclasses

    from fieldmem.driver import leaves, lowering

    state = {f"leaf{i}": jnp.full((2,), float(i)) for i in range(7)}
    call = _call(state)
    plain, donated = start_variants(call, None).result()
    assert donated.variant.outputs is plain.variant.outputs

    lowered = lowering.lower(call, donated=True)[0]
    compiled = lowered.compile()
    formats = leaves.compiled_formats(compiled, "output")
    own = leaves._output_leaves(lowered, call, formats)
    assert own == plain.variant.outputs and [o.path for o in own] == [f"out['leaf{i}']" for i in range(7)]
    tree = leaves.out_tree(lowered)
    assert leaves.compiled_outputs(lowered, compiled, call, structs=False, like=(own, tree))[0] is own
    elsewhere = tuple(dataclasses.replace(o, sharding="cpu:1") for o in own)  # compiled otherwise
    for like in ((elsewhere, tree), (own, None), (own, jax.tree_util.tree_structure((1, 2)))):
        taken = leaves.compiled_outputs(lowered, compiled, call, structs=False, like=like)[0]
        assert taken is not like[0] and taken == own
    structs = leaves.compiled_outputs(lowered, compiled, call, structs=True, like=(own, tree))[1]()
    assert [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(structs)] == [((2,), jnp.float32)] * 7


def test_a_quoted_string_unquotes_as_json_reads_it() -> None:
    """Every string of up to 4 characters over escapes' letters: the shortcut for a backslash that starts no
    JSON escape gives what trying json and falling back gives (as jax writes ``op_name="state[\\'w\\']"``)."""
    import itertools
    import json

    from fieldmem.xla.hlo.text import unquote

    def by_json(text: str) -> str:
        try:
            return json.loads(text)
        except ValueError:
            return text[1:-1]

    alphabet = ["\\", '"', "'", "u", "0", "a", "n", "/"]
    for size in range(5):
        for chars in itertools.product(alphabet, repeat=size):
            text = '"' + "".join(chars) + '"'
            assert unquote(text) == by_json(text), text
    assert unquote("\"state[\\'leaf0\\']\"") == "state[\\'leaf0\\']"
    assert unquote('"a\\u0041\\n"') == "aA\n"


@pytest.mark.compile
def test_the_two_variants_have_one_source_table_so_the_donated_one_takes_the_plain_ones_lines() -> None:
    """jax records the Python stack of the lowering, fieldmem's frames included, in the HLO's source
    tables; the donated program reuses the plain one's parsed lines only under the same tables. Both are
    lowered from one line, so their tables are the same, and the second parse parses only the lines the
    donated program has of its own (the aliased outputs' header and tuple)."""
    from fieldmem.xla.hlo import parse as hlo_parse

    state = {f"leaf{i}": jnp.full((2,), float(i)) for i in range(30)}
    plain, donated = start_variants(_call(state), None).result()

    def tables(text: str) -> str:
        body = hlo_parse._first_module(text)[1]
        return hlo_parse._parse_tables(body).key()

    assert tables(plain.variant.hlo_text) == tables(donated.variant.hlo_text)
    parser = hlo_parse.HloParser()
    parser.parse(plain.variant.hlo_text)
    shared = parser._lines[1]
    donated_lines = [
        line for line in hlo_parse._first_module(donated.variant.hlo_text)[1] if line.startswith("  ") and " = " in line
    ]
    parsed_again = [line for line in donated_lines if line not in shared]
    assert len(parsed_again) <= 3 < len(donated_lines) - len(parsed_again)


class _Analysis:
    """What ``memory_analysis()`` returns, with every figure fieldmem reads and no buffer assignment."""

    def __getattr__(self, name: str) -> int:
        if name.endswith("_in_bytes"):
            return 64
        raise AttributeError(name)


class _Compiled:
    """A compiled program whose ``memory_analysis()`` returns ``value``, raises it, or waits for ``gate``."""

    def __init__(self, value: object, gate: threading.Event | None = None) -> None:
        self.value, self.gate, self.thread = value, gate, ""

    def memory_analysis(self) -> object:
        self.thread = threading.current_thread().name
        if self.gate is not None:
            assert self.gate.wait(10)
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def test_the_memory_analysis_runs_beside_the_thread_that_started_it_and_its_failure_is_said() -> None:
    """read_variant starts ``memory_analysis()`` (C++ that lets go of the GIL) in a thread of its own and
    reads the rest meanwhile: the call waits here for this thread to go on, and is read after."""
    from fieldmem.driver import variant

    gate = threading.Event()
    compiled = _Compiled(_Analysis(), gate)
    started = variant._MemoryAnalysis(compiled)
    gate.set()  # this thread went on while the analysis waited
    reading = variant.read_memory(compiled, started=started)
    assert compiled.thread != threading.current_thread().name
    assert reading.figures["temp_bytes"] == 64 and reading.buffers_unavailable is not None

    failed = variant.read_memory(_Compiled(RuntimeError("no analysis here")))
    assert set(failed.figures.values()) == {None}
    assert (
        "memory_analysis() failed on this backend: RuntimeError: no analysis here" in failed.unavailable["temp_bytes"]
    )
    nothing = variant.read_memory(_Compiled(None))
    assert nothing.unavailable["temp_bytes"] == "memory_analysis() returned nothing on this backend"


def test_the_collector_paused_as_a_decorator_is_restored_as_it_was_even_on_error() -> None:
    from fieldmem.model.collector import collector_paused

    @collector_paused()
    def inside(fail: bool) -> bool:
        if fail:
            raise ValueError("inside")
        return gc.isenabled()

    assert gc.isenabled()
    assert inside(False) is False and gc.isenabled()
    with pytest.raises(ValueError, match="inside"):
        inside(True)
    assert gc.isenabled()
    gc.disable()
    try:
        assert inside(False) is False and not gc.isenabled()  # the user's choice stays
    finally:
        gc.enable()


@pytest.mark.compile
def test_a_worker_holds_what_a_check_leaves_to_free_and_nothing_is_held_otherwise() -> None:
    """Inside releases_held, each target's compiled programs (executables and all) are kept in the list
    given, for its owner to free after answering; outside, nothing outlives the check."""
    import weakref

    from fieldmem.driver import lowering
    from fieldmem.parent.checker import check_targets, releases_held
    from fieldmem.request.options import CheckOptions

    compiled: list[weakref.ref] = []
    original = lowering._compiled

    def watched(*args: object, **kwargs: object) -> object:
        handle = original(*args, **kwargs)
        compiled.append(weakref.ref(handle))
        return handle

    def update(x: jax.Array) -> jax.Array:
        return x * 2

    target = make_target(update, lambda: (jnp.ones((4,)),), donate="0")
    options = CheckOptions(jobs=1)
    lowering._compiled = watched
    try:
        held: list[object] = []
        with releases_held(held):
            report = check_targets([target], options)
        assert report.results[0].status == "ok", report.results[0].error
        assert len(compiled) == 2 and all(ref() is not None for ref in compiled) and held
        held.clear()
        gc.collect()
        assert all(ref() is None for ref in compiled)
        compiled.clear()
        check_targets([target], options)
        gc.collect()
        assert len(compiled) == 2 and all(ref() is None for ref in compiled)
    finally:
        lowering._compiled = original


def test_a_worker_freezes_what_importing_jax_made_once_and_nothing_after() -> None:
    """The first request's objects of the imports go out of the collector's sight; a later request (a
    serving worker's) freezes nothing more, so the user's objects of one check stay collectable."""
    from fieldmem.worker import main as worker

    was = worker._frozen
    worker._frozen = False
    try:
        worker._freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen > 0 and worker._frozen
        later = [[object()] for _ in range(100)]
        worker._freeze_imports()
        assert gc.get_freeze_count() == frozen and later
    finally:
        gc.unfreeze()
        worker._frozen = was


def test_a_deviceless_compile_takes_its_module_from_its_dump_and_serializes_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module proto is serialized beside the memory analysis only where it is read: an accelerator
    compile's buffer assignment and module come from XLA's dump (a pod-sized module is not serialized
    for nothing)."""
    from fieldmem.driver import dumps, variant

    compiled = _Compiled(_Analysis())
    serialized: list[object] = []
    monkeypatch.setattr(dumps, "is_dumped", lambda c: c is compiled)
    monkeypatch.setattr(dumps, "dumped", lambda c: b"hlo proto" if c is compiled else None)
    monkeypatch.setattr(variant, "_module_proto", lambda c: serialized.append(c) or b"serialized")
    reading = variant.read_memory(compiled)
    assert (reading.buffer_assignment, reading.hlo_module_proto, reading.hlo_proto) == (None, None, b"hlo proto")
    assert serialized == []
    variant.read_memory(_Compiled(_Analysis()))  # not deviceless: serialized while the analysis runs
    assert len(serialized) == 1


# ----------------------------------------------------------------------------
# A worker's readings: written and read by msgspec


@pytest.fixture(scope="module")
def answers() -> list[object]:
    """What a worker sends for a real check of several leaves: both variants' readings, the call's shape, the
    run's readings, and an error result."""
    from fieldmem.driver import call_shape, prepare_call, run_variant, start_variants
    from fieldmem.model.errors import TargetError
    from fieldmem.request.spec import DonateSpec, StaticSpec
    from fieldmem.worker.results import error_result

    def update(state: dict[str, jax.Array], w: jax.Array) -> dict[str, jax.Array]:
        return {k: (v * w).at[0].set(1.0) for k, v in state.items()}

    call = prepare_call(
        update,
        ({f"leaf{i}": jnp.ones((4,)) for i in range(6)}, jnp.ones((4,))),
        {},
        donate=DonateSpec(),
        static=StaticSpec(),
    )
    pending = start_variants(call, None)
    plain, donated = pending.result()
    runs = {"donated": run_variant(pending.call, donated), "plain": run_variant(pending.call, plain)}
    error = error_result("pkg.mod:f", "pkg.mod:f", TargetError("no such target: é, ✓"), "mod.py:3")
    return [plain.variant, donated.variant, call_shape(pending.call), runs, error]


def test_a_reading_crosses_the_pipe_as_it_was_made(answers: list[object]) -> None:
    """The codec writes each reading (records straight to JSON by msgspec, in C; bytes as base64) and reads it
    back into the same records, through an event line as the worker writes it and the parent reads it; the
    document is the one :func:`fieldmem.model.codec.encode` makes for files, and the careful reading (which names
    paths and keeps unknown words) rebuilds the same records from it."""
    import io
    import json

    from fieldmem.model.codec import _decode, dumps, encode
    from fieldmem.model.readings import CallShape, CompiledVariant, RunReading
    from fieldmem.model.target import TargetResult
    from fieldmem.worker.protocol import decode_value, read_event, write_event

    kinds = [CompiledVariant, CompiledVariant, CallShape, dict[str, RunReading], TargetResult]
    assert isinstance(answers[0], CompiledVariant) and answers[0].buffer_assignment  # bytes, not only text
    for value, kind in zip(answers, kinds):
        channel = io.StringIO()
        write_event(channel, "plain", {"value": dumps(value)}, b=0, spec=0, name="m:f")
        event = read_event(channel.getvalue().encode())
        assert event is not None and event["name"] == "m:f"
        assert decode_value(kind, event["value"]) == value  # type: ignore[arg-type]
        assert json.loads(dumps(value)) == encode(value)
        assert _decode(kind, event["value"]) == value


def test_what_msgspec_cannot_write_or_read_goes_by_pythons_json(answers: list[object]) -> None:
    """A name holding a lone surrogate (no UTF-8 for it) is written as JSON writes it, escaped, and read back;
    a line msgspec cannot read (NaN, which Python's JSON writes) is read as Python's JSON reads it; a line
    cut short is no event; a document that is not the record asked for is refused."""
    import dataclasses
    import io
    import math

    from fieldmem.model.codec import dumps
    from fieldmem.model.target import TargetResult
    from fieldmem.worker.protocol import decode_value, read_event, write_event

    error = answers[4]
    assert isinstance(error, TargetResult)
    odd = dataclasses.replace(error, name="bad \ud800 name")
    text = dumps(odd)
    assert "\\ud800" in text and text.isascii()
    channel = io.StringIO()
    write_event(channel, "error", {"result": text}, b=0, spec=0, name="m:f")
    event = read_event(channel.getvalue().encode())
    assert event is not None and decode_value(TargetResult, event["result"]) == odd

    event = read_event(b'{"e": "done", "seconds": NaN}')
    assert event is not None and event["e"] == "done" and math.isnan(event["seconds"])
    assert read_event(b'{"e": "error", "result": ') is None  # cut short by the worker's death
    with pytest.raises(ValueError, match="status"):
        decode_value(TargetResult, {**json_of(error), "status": "fine"})


def json_of(value: object) -> dict[str, object]:
    import json

    from fieldmem.model.codec import dumps

    document = json.loads(dumps(value))
    assert isinstance(document, dict)
    return document


def test_the_collector_resumed_in_a_pause_and_kept_paused_on_the_way_out() -> None:
    """Resumed: as before the pause, and paused again after (outside a pause, nothing changes). Kept paused:
    the pause's end leaves it off (a one-shot worker ends by os._exit)."""
    from fieldmem.model.collector import collector_paused, collector_resumed, collector_stays_paused

    assert gc.isenabled()
    with collector_resumed():
        assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_resumed():
            assert gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused(), collector_resumed():
            assert not gc.isenabled()  # the user had it off
    finally:
        gc.enable()
    collector_stays_paused()  # outside a pause: nothing
    assert gc.isenabled()
    try:
        with collector_paused():
            collector_stays_paused()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.compile
def test_a_worker_answers_within_one_pause_and_the_users_code_runs_with_the_collector_on() -> None:
    """Inside a worker's pause, a check makes its arguments and traces the function with the collector as the
    user left it, and reads, analyses and answers with it paused (no pass between the analysis and the
    answer walks the records of the check)."""
    from fieldmem.model.collector import collector_paused
    from fieldmem.parent.checker import check_targets
    from fieldmem.request.options import CheckOptions

    seen: dict[str, bool] = {}

    def arguments() -> tuple[jax.Array]:
        seen["arguments"] = gc.isenabled()
        return (jnp.ones((4,)),)

    def update(x: jax.Array) -> jax.Array:
        seen["tracing"] = gc.isenabled()
        return x * 2

    def done(n: int, checked: object) -> None:
        seen["answer"] = gc.isenabled()

    target = make_target(update, arguments, donate="0")
    with collector_paused():
        report = check_targets([target], CheckOptions(jobs=1), done=done)
    assert report.results[0].status == "ok", report.results[0].error
    assert seen == {"arguments": True, "tracing": True, "answer": False}
    assert gc.isenabled()
