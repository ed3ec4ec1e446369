"""Per-leaf work done once: what the faster paths read is what the careful ones read.

A pytree of thousands of leaves is read leaf by leaf in many places (the
arguments' paths, the outputs, bytes per shape, the buffer assignment). Each
shortcut here is checked against an independent reading: hand-computed
bytes, the arguments' own paths, jax's own outputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from fieldmem.driver import prepare_call, start_variants
from fieldmem.driver.shapes import dtype_name, shape_bytes
from fieldmem.request.spec import DonateSpec, StaticSpec


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
        reference = jax.eval_shape(call.function, *call.args)
        assert jax.tree_util.tree_structure(donated.outputs) == jax.tree_util.tree_structure(reference)
        assert [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(donated.outputs)] == [
            (s.shape, s.dtype) for s in jax.tree_util.tree_leaves(reference)
        ]


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
    hlo_parse._last_lines = ("", {})
    hlo_parse._parse_module(plain.variant.hlo_text)
    shared = hlo_parse._last_lines[1]
    donated_lines = [line for line in hlo_parse._first_module(donated.variant.hlo_text)[1] if line.startswith("  ") and " = " in line]
    parsed_again = [line for line in donated_lines if line not in shared]
    assert len(parsed_again) <= 3 < len(donated_lines) - len(parsed_again)
