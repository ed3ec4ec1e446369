"""Analysis of real compiles of small functions: numbering, aliases, unusable donations, copies.

Each function is checked through the Python API (``check_targets`` on a
:class:`~fieldmem.request.target.Target` built in the test). Where the report claims
an alias, the same program is compiled here with plain ``jax.jit`` and run,
and the claim is checked against buffer pointers. Arrays are small (64x64
f32 = 16 KiB); compiles are shared between tests through module fixtures.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import resource
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax import lax

from fieldmem.driver import prepare_call
from fieldmem.findings.analysis import analyze_target
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.xla import hlo

from helpers_compile import (
    check_one,
    compile_quietly,
    compiled_variants,
    make_target,
    run_and_check_aliases,
    xla_memory,
)

pytestmark = pytest.mark.compile

F32 = 4
N = 64
KIB16 = N * N * F32
HERE = os.path.basename(__file__)


def zeros(*shape: int, dtype: Any = jnp.float32) -> jax.Array:
    return jnp.zeros(shape or (N, N), dtype)


def line_of(fn: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def names_of(fn: Any, count: int) -> list[str]:
    return list(inspect.signature(inspect.unwrap(fn)).parameters)[:count]


def alias_pairs(result: Any, variant: str = "donated") -> list[tuple[str, int, str, int]]:
    return [(a.input, a.input_index, a.output, a.output_index) for a in result.variants[variant].aliases]


def inputs_of(result: Any) -> list[tuple[int, str, bool, bool]]:
    return [(i.index, i.path, i.donated, i.used) for i in result.inputs]


# ----------------------------------------------------------------------------
# Keyword arguments: numbering in the order given, donation by name


def kw_update(a, *, zeta, alpha, mid):
    return {"z": zeta["p"] * 2.0, "a": alpha - 1.0, "first": a + 1.0, "m": mid[1] + 1.0}


def kw_args() -> tuple[tuple[Any, ...], dict[str, Any]]:
    # given in non-alphabetical order; every leaf has its own size so a wrong
    # mapping would show in the paths or the byte counts
    return (zeros(),), {"zeta": {"p": zeros(64, 32)}, "alpha": zeros(16, 64), "mid": (zeros(8, 8), zeros(4, 64))}


@pytest.fixture(scope="module")
def kw_all() -> Any:
    return check_one(make_target(kw_update, kw_args), min_bytes=256)


@pytest.fixture(scope="module")
def kw_by_name() -> Any:
    return check_one(make_target(kw_update, kw_args, donate=("zeta",)), min_bytes=256)


def test_kwargs_are_numbered_in_the_order_given(kw_all: Any) -> None:
    assert inputs_of(kw_all) == [
        (0, "a", True, True),
        (1, "zeta['p']", True, True),
        (2, "alpha", True, True),
        (3, "mid[0]", True, False),  # never read: jit drops it
        (4, "mid[1]", True, True),
    ]
    assert [i.bytes for i in kw_all.inputs] == [KIB16, 64 * 32 * F32, 16 * 64 * F32, 8 * 8 * F32, 4 * 64 * F32]
    assert [o.path for o in kw_all.outputs] == ["out['a']", "out['first']", "out['m']", "out['z']"]
    assert alias_pairs(kw_all) == [
        ("a", 0, "out['first']", 1),
        ("zeta['p']", 1, "out['z']", 3),
        ("alpha", 2, "out['a']", 0),
        ("mid[1]", 4, "out['m']", 2),
    ]
    [unusable] = kw_all.variants["donated"].unusable_donations
    assert (unusable.input, unusable.input_index, unusable.code) == ("mid[0]", 3, "unused")
    assert kw_all.variants["donated"].donated_arguments == ("a", "zeta", "alpha", "mid")


def test_kwargs_aliases_happen_at_run_time(kw_all: Any) -> None:
    args, kwargs = kw_args()
    compiled = compile_quietly(jax.jit(kw_update, donate_argnames=("a", "zeta", "alpha", "mid")), *args, **kwargs)
    assert kw_all.variants["donated"].memory.alias_bytes == xla_memory(compiled)["alias_bytes"]
    args, kwargs = kw_args()
    run_and_check_aliases(compiled, kw_all, args, kwargs, ["a"])


def test_donation_by_name_of_a_keyword_argument(kw_by_name: Any) -> None:
    assert [(i.path, i.donated) for i in kw_by_name.inputs] == [
        ("a", False),
        ("zeta['p']", True),
        ("alpha", False),
        ("mid[0]", False),
        ("mid[1]", False),
    ]
    assert kw_by_name.variants["donated"].donated_arguments == ("zeta",)
    assert alias_pairs(kw_by_name) == [("zeta['p']", 1, "out['z']", 3)]
    assert not kw_by_name.verdict.in_place
    new_buffers = {f.output: f.message for f in kw_by_name.verdict.findings if f.code == "new-buffer"}
    assert set(new_buffers) == {"out['first']"}
    assert "donate a " in new_buffers["out['first']"]
    # smaller than the state reused (zeta['p']): new outputs, each naming the input it may be the next value of
    new_outputs = {f.output: f.message for f in kw_by_name.verdict.findings if f.code == "new-output"}
    assert set(new_outputs) == {"out['a']", "out['m']"}
    assert new_outputs["out['a']"].endswith("if out['a'] is alpha's next value, donate alpha")
    assert new_outputs["out['m']"].endswith("if out['m'] is mid[1]'s next value, donate mid")
    args, kwargs = kw_args()
    compiled = compile_quietly(jax.jit(kw_update, donate_argnames=("zeta",)), *args, **kwargs)
    assert kw_by_name.variants["donated"].memory.alias_bytes == xla_memory(compiled)["alias_bytes"]
    args, kwargs = kw_args()
    run_and_check_aliases(compiled, kw_by_name, args, kwargs, ["a"])


def test_positional_parameter_passed_by_keyword_is_donated_by_name() -> None:
    def update(u, v):
        return u + v

    result = check_one(make_target(update, lambda: ((zeros(),), {"v": zeros()}), donate=("v",)))
    assert inputs_of(result) == [(0, "u", False, True), (1, "v", True, True)]
    assert alias_pairs(result) == [("v", 1, "out", 0)]


# ----------------------------------------------------------------------------
# Static arguments


def scan_stepper(u, n_steps):
    def step(c, _):
        return c + 0.1 * (jnp.roll(c, 1, axis=0) - c), None  # scan_stepper body

    out, _ = lax.scan(step, u, None, length=n_steps)
    return out


@pytest.fixture(scope="module")
def scan_result() -> Any:
    return check_one(make_target(scan_stepper, lambda: (zeros(), 7)))


def test_python_int_a_scan_length_needs_is_made_static_and_said(scan_result: Any) -> None:
    # jax.jit traces n_steps and lax.scan's length must be concrete: made static, with jax's reason
    assert inputs_of(scan_result) == [(0, "u", True, True)]
    [made] = scan_result.made_static
    assert (made.argument, made.code) == ("n_steps", "concrete") and "concrete" in made.reason
    assert [f.input for f in scan_result.verdict.findings if f.code == "made-static"] == ["n_steps"]
    assert alias_pairs(scan_result) == [("u", 0, "out", 0)]


def test_scan_carry_copied_every_iteration_is_a_loop_copy(scan_result: Any) -> None:
    loops = [c for c in scan_result.variants["donated"].copies if c.kind == "loop" and c.bytes == KIB16]
    assert loops, scan_result.variants["donated"].copies
    copy = loops[0]
    assert copy.trip_count == 7 and copy.bytes_per_call == 7 * KIB16
    assert copy.of_parameter is None and copy.shape.startswith("f32[64,64]")
    assert copy.source == f"{_display(__file__)}:{line_of(scan_stepper, '# scan_stepper body')}"
    assert not scan_result.verdict.in_place
    [finding] = [f for f in scan_result.verdict.findings if f.code == "loop-copy" and f.source == copy.source]
    assert "every iteration (x7 = 112.0 KiB per call)" in finding.message
    # without donation the carry's initial value is also copied from u
    plain = [c for c in scan_result.variants["plain"].copies if c.kind == "parameter"]
    assert [(c.of_parameter, c.bytes) for c in plain] == [("u", KIB16)]


def fori_stepper(u):
    return lax.fori_loop(0, 5, lambda i, c: c + 0.1 * (jnp.roll(c, 1, axis=0) - c), u)  # fori body


def while_stepper(u, n):
    def body(state):
        c, i = state
        return c + 0.1 * (jnp.roll(c, 1, axis=0) - c), i + 1  # while body

    return lax.while_loop(lambda state: state[1] < n, body, (u, jnp.int32(0)))[0]


@pytest.mark.parametrize(
    ("fn", "args", "marker", "trip", "per_call"),
    [
        (fori_stepper, lambda: (zeros(),), "# fori body", 5, "(x5 = 80.0 KiB per call)"),
        # the bound is a traced value: the trip count is only known at run time
        (while_stepper, lambda: (zeros(), jnp.int32(5)), "# while body", None, "(trip count unknown)"),
    ],
    ids=["fori_loop", "while_loop"],
)
def test_loop_carry_copies_are_per_iteration_and_one_off_copies_say_once(
    fn: Any, args: Any, marker: str, trip: int | None, per_call: str
) -> None:
    result = check_one(make_target(fn, args))
    source = f"{_display(__file__)}:{line_of(fn, marker)}"
    [loop] = [c for c in result.variants["donated"].copies if c.kind == "loop" and c.bytes == KIB16]
    assert (loop.trip_count, loop.bytes_per_call, loop.source) == (trip, trip * KIB16 if trip else None, source)
    [finding] = [f for f in result.verdict.findings if f.code == "loop-copy"]
    assert f"is copied every iteration {per_call} at {source}" in finding.message
    # the copy of u before the loop (without donation) happens once, and says so
    [once] = [f for f in result.verdict.findings if f.code == "plain-copy"]
    assert once.input == "u" and once.message.startswith("without donation, u is copied once per call (16.0 KiB)")
    assert [c.kind for c in result.variants["plain"].copies if c.bytes == KIB16] == ["loop", "parameter"]


def _display(file: str) -> str:
    relative = os.path.relpath(file)
    return relative if not relative.startswith("..") else file


def branchy(x, scale, n):
    if scale > 1.0:  # Python control flow: only works when scale is static
        x = x * scale
    return x + n


def test_explicit_static_argument() -> None:
    result = check_one(make_target(branchy, lambda: (zeros(), 2.0, 3), static=("scale",)))
    # n, a Python int, is traced as jax.jit(branchy, static_argnames="scale") traces it; not donated
    assert inputs_of(result) == [(0, "x", True, True), (1, "n", False, True)]
    assert alias_pairs(result) == [("x", 0, "out", 0)]
    assert result.verdict.in_place


def test_explicit_static_by_number_and_keyword() -> None:
    result = check_one(make_target(branchy, lambda: ((zeros(),), {"scale": 2.0, "n": 3}), static=("scale",)))
    assert inputs_of(result) == [(0, "x", True, True), (1, "n", False, True)]
    assert result.verdict.in_place


# ----------------------------------------------------------------------------
# The user's own jit


@partial(jax.jit, donate_argnums=(0,), static_argnames=("n",))
def jitted_scale(x, y, n):
    return x * n + y


def jitted_args() -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (zeros(), zeros()), {"n": 3}


@pytest.fixture(scope="module")
def jitted_own() -> Any:
    return check_one(make_target(jitted_scale, jitted_args))


def test_jit_object_keeps_its_own_donation_and_static_argnames(jitted_own: Any) -> None:
    assert jitted_own.donate == "jit"
    assert inputs_of(jitted_own) == [(0, "x", True, True), (1, "y", False, True)]
    assert alias_pairs(jitted_own) == [("x", 0, "out", 0)]
    assert jitted_own.variants["plain"].aliases == ()
    assert jitted_own.verdict.in_place
    # the donated variant is the user's program: compare with it, then run it
    args, kwargs = jitted_args()
    compiled = compile_quietly(jitted_scale, *args, **kwargs)
    assert jitted_own.variants["donated"].memory.peak_bytes == xla_memory(compiled)["peak_bytes"]
    args, kwargs = jitted_args()
    run_and_check_aliases(compiled, jitted_own, args, kwargs, ["x", "y", "n"], static=("n",))
    assert not args[1].is_deleted()


def test_donate_none_overrides_the_jit_donation() -> None:
    result = check_one(make_target(jitted_scale, jitted_args, donate="none"))
    assert result.donate == "none"
    assert [i.donated for i in result.inputs] == [False, False]
    assert result.variants["donated"].aliases == ()
    assert not result.verdict.in_place
    [finding] = [f for f in result.verdict.findings if f.code == "new-buffer"]
    assert "donate x" in finding.message


@partial(jax.jit, donate_argnums=(0,))
def jitted_traced_n(x, n):
    return x * n


def test_jit_object_with_an_extra_static_argument_keeps_its_donation() -> None:
    """``static=`` on a jit object whose own jit traces that argument: rebuilt, with its donation."""
    traced = check_one(make_target(jitted_traced_n, lambda: (zeros(), 3)))
    assert inputs_of(traced) == [(0, "x", True, True), (1, "n", False, True)]  # the jit's own: n traced
    result = check_one(make_target(jitted_traced_n, lambda: (zeros(), 3), static=("n",)))
    assert result.donate == "jit"
    assert inputs_of(result) == [(0, "x", True, True)]
    assert alias_pairs(result) == [("x", 0, "out", 0)]
    assert result.verdict.in_place


def test_jit_with_static_argnames_given_positionally() -> None:
    result = check_one(make_target(jitted_scale, lambda: (zeros(), zeros(), 3)))
    assert inputs_of(result) == [(0, "x", True, True), (1, "y", False, True)]
    assert alias_pairs(result) == [("x", 0, "out", 0)]


def test_jit_object_layouts_are_kept_when_fieldmem_rebuilds_it() -> None:
    """A jit whose in/out_shardings give a layout (a ``Format``): the plain variant, rebuilt without the
    donation, is compiled with the same layouts as the user's own jit, not jax's default ones."""
    from jax.experimental.layout import Format, Layout

    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    transposed = Format(Layout(major_to_minor=(1, 0)), device)
    jitted = jax.jit(lambda x: x * 2, in_shardings=transposed, out_shardings=transposed, donate_argnums=0)
    call = prepare_call(jitted, (jnp.ones((8, 4)),), {}, donate=DonateSpec(), static=StaticSpec())
    plain, donated = compiled_variants(call)
    own = jitted.lower(jnp.ones((8, 4))).compile()
    assert str(own.input_formats[0][0].layout.major_to_minor) == "(1, 0)"
    assert [leaf.layout for leaf in plain.inputs] == [leaf.layout for leaf in donated.inputs]
    assert [leaf.layout for leaf in plain.outputs] == [leaf.layout for leaf in donated.outputs]
    assert plain.inputs[0].layout == "major-to-minor (1,0)"


# ----------------------------------------------------------------------------
# Pytrees of several kinds


class Params(NamedTuple):
    w: jax.Array
    b: jax.Array


@partial(jax.tree_util.register_dataclass, data_fields=["y", "x"], meta_fields=["tag"])
@dataclasses.dataclass
class State:
    x: jax.Array
    y: jax.Array
    tag: str = "s"


class Module(eqx.Module):
    w: jax.Array
    b: jax.Array
    k: int = eqx.field(static=True, default=3)


def nt_update(p):
    return Params(p.w * 2.0, p.b + 1.0)


def dc_update(s, scale):
    return State(x=s.x * scale, y=s.y + 1.0, tag=s.tag)


def eqx_update(m):
    return eqx.tree_at(lambda m: m.w, m, m.w * m.k)


def dict_update(d):
    return {"velocity": d["velocity"] * 0.9, "count": d["count"] + 1}


PYTREES = {
    "namedtuple": (
        nt_update,
        lambda: (Params(zeros(), zeros(64, 8)),),
        [(0, "p.w"), (1, "p.b")],
        [("p.w", 0, "out.w", 0), ("p.b", 1, "out.b", 1)],
    ),
    "dataclass": (
        dc_update,
        lambda: (State(zeros(), zeros(32, 64)), jnp.float32(2.0)),
        [(0, "s.y"), (1, "s.x"), (2, "scale")],  # flattened in data_fields order
        [("s.y", 0, "out.y", 0), ("s.x", 1, "out.x", 1)],
    ),
    "equinox": (
        eqx_update,
        lambda: (Module(zeros(), zeros(64, 8)),),
        [(0, "m.w"), (1, "m.b")],
        [("m.w", 0, "out.w", 0), ("m.b", 1, "out.b", 1)],
    ),
    "dict": (
        dict_update,
        lambda: ({"velocity": zeros(), "count": jnp.int32(0)},),
        [(0, "d['count']"), (1, "d['velocity']")],
        [("d['count']", 0, "out['count']", 0), ("d['velocity']", 1, "out['velocity']", 1)],
    ),
}


@pytest.mark.parametrize("kind", sorted(PYTREES))
def test_pytrees_of_several_kinds(kind: str) -> None:
    fn, factory, inputs, aliases = PYTREES[kind]
    result = check_one(make_target(fn, factory), min_bytes=1)
    assert [(i.index, i.path) for i in result.inputs] == inputs
    assert alias_pairs(result) == aliases
    args = factory()
    names = names_of(fn, len(args))
    compiled = compile_quietly(jax.jit(fn, donate_argnums=tuple(range(len(args)))), *args)
    assert result.variants["donated"].memory.argument_bytes == xla_memory(compiled)["argument_bytes"]
    run_and_check_aliases(compiled, result, factory(), {}, names)


def many_update(d):
    return {k: v + 1.0 for k, v in d.items()}


def test_hundreds_of_leaves() -> None:
    # keys whose sorted order differs from insertion order; ten sizes (a
    # distinct shape per leaf would make XLA compile for seconds). Not numpy
    # arrays put on the device: on CPU those can share numpy's memory, and
    # then PJRT deletes the donated input but copies instead of aliasing.
    def factory():
        keys = [(i * 37) % 300 for i in range(300)]
        return ({f"k{k:03d}": zeros(4, k % 10 + 1) for k in keys},)

    result = check_one(make_target(many_update, factory), min_bytes=1)
    expected = [f"d['k{i:03d}']" for i in range(300)]
    assert [i.path for i in result.inputs] == expected
    assert [i.index for i in result.inputs] == list(range(300))
    assert [i.bytes for i in result.inputs] == [4 * (i % 10 + 1) * F32 for i in range(300)]
    assert alias_pairs(result) == [(expected[i], i, f"out['k{i:03d}']", i) for i in range(300)]
    assert result.verdict.in_place
    compiled = compile_quietly(jax.jit(many_update, donate_argnums=0), *factory())
    run_and_check_aliases(compiled, result, factory(), {}, ["d"])


# ----------------------------------------------------------------------------
# Arguments that allocate nothing


def big_update(x, row):
    return x.at[0].set(row)


def test_shape_dtype_struct_of_64_gib_allocates_nothing() -> None:
    side = 131072  # 131072**2 f32 = 64 GiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = check_one(
        make_target(
            big_update,
            lambda: (jax.ShapeDtypeStruct((side, side), jnp.float32), jax.ShapeDtypeStruct((side,), jnp.float32)),
            donate=("x",),
        )
    )
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 2 * 1024 * 1024  # far less than 64 GiB (less than 2 GiB) was touched
    size = side * side * F32
    assert result.inputs[0].bytes == size == 64 * 1024**3
    assert alias_pairs(result) == [("x", 0, "out", 0)]
    assert result.variants["donated"].aliases[0].bytes == size
    donated = result.variants["donated"].memory
    assert donated.alias_bytes == size and donated.argument_bytes == size + side * F32
    [copy] = [c for c in result.variants["plain"].copies if c.kind == "parameter"]
    assert copy.of_parameter == "x" and copy.bytes == size
    assert result.savings["peak_bytes"] == size
    assert result.verdict.in_place


# ----------------------------------------------------------------------------
# Unusable donations


def unused_middle(a, b, c):
    return a + 1.0, c * 2.0


@pytest.fixture(scope="module")
def unused_result() -> Any:
    return check_one(make_target(unused_middle, lambda: (zeros(), zeros(32, 32), zeros(16, 64))))


def test_unused_donated_argument_does_not_shift_numbering(unused_result: Any) -> None:
    assert inputs_of(unused_result) == [(0, "a", True, True), (1, "b", True, False), (2, "c", True, True)]
    assert alias_pairs(unused_result) == [("a", 0, "out[0]", 0), ("c", 2, "out[1]", 1)]
    [unusable] = unused_result.variants["donated"].unusable_donations
    assert (unusable.input, unusable.input_index, unusable.bytes, unusable.code) == ("b", 1, 32 * 32 * F32, "unused")
    assert "never reads it" in unusable.reason
    [warning] = [f for f in unused_result.verdict.findings if f.code == "unusable-donation"]
    assert warning.input == "b" and warning.severity == "warning"
    assert unused_result.verdict.in_place
    args = (zeros(), zeros(32, 32), zeros(16, 64))
    compiled = compile_quietly(jax.jit(unused_middle, donate_argnums=(0, 1, 2)), *args)
    assert unused_result.variants["donated"].memory.argument_bytes == xla_memory(compiled)["argument_bytes"]
    run_and_check_aliases(compiled, unused_result, (zeros(), zeros(32, 32), zeros(16, 64)), {}, ["a", "b", "c"])


def test_unused_argument_through_prepare_call_and_analyze_target() -> None:
    """The lower-level API gives the same numbering: HLO parameters skip the dropped leaf."""
    call = prepare_call(
        unused_middle, (zeros(), zeros(32, 32), zeros(16, 64)), {}, donate=DonateSpec(), static=StaticSpec()
    )
    plain, donated = compiled_variants(call)
    assert [(leaf.path, leaf.hlo_parameter) for leaf in donated.inputs] == [("a", 0), ("b", None), ("c", 1)]
    result = analyze_target(
        target="t",
        name="t",
        definition=None,
        donate="all",
        expect="any",
        max_peak=None,
        plain=plain,
        donated=donated,
        min_bytes=1024,
    )
    assert alias_pairs(result) == [("a", 0, "out[0]", 0), ("c", 2, "out[1]", 1)]
    assert [u.code for u in result.variants["donated"].unusable_donations] == ["unused"]


def to_bf16(x):
    return x.astype(jnp.bfloat16)


def test_dtype_change_makes_the_donation_unusable() -> None:
    result = check_one(make_target(to_bf16, lambda: (zeros(),)))
    assert alias_pairs(result) == []
    [unusable] = result.variants["donated"].unusable_donations
    assert unusable.input == "x" and unusable.code == "no-output-of-size" and unusable.bytes == KIB16
    assert "dtype bfloat16" in unusable.reason and "dtype change" in unusable.reason
    assert not result.verdict.in_place
    [new_buffer] = [f for f in result.verdict.findings if f.code == "new-buffer"]
    assert new_buffer.output == "out"
    assert new_buffer.message.startswith("out (bfloat16[64,64], 8.0 KiB) is written to a new buffer")
    assert f"{HERE}:{line_of(to_bf16, 'astype')}" in new_buffer.message


def add_two(a, b):
    return a + b


def test_second_donor_of_the_same_size_finds_the_output_taken() -> None:
    result = check_one(make_target(add_two, lambda: (zeros(), zeros())))
    assert len(result.variants["donated"].aliases) == 1
    [unusable] = result.variants["donated"].unusable_donations
    assert unusable.code == "outputs-taken"
    assert "already taken" in unusable.reason
    assert result.verdict.in_place  # the one output does reuse a donated buffer
    assert any("Some donated buffers were not usable" in w for w in result.variants["donated"].jax_warnings)


def test_checking_the_same_function_again_gives_the_same_report() -> None:
    """jax caches lowerings; a cached one must not lose the unusable-donation warning."""
    first = check_one(make_target(add_two, lambda: (zeros(), zeros())))
    again = check_one(make_target(add_two, lambda: (zeros(), zeros())))
    assert again.variants["donated"].jax_warnings == first.variants["donated"].jax_warnings != ()
    for variant in ("plain", "donated"):
        assert again.variants[variant].memory == first.variants[variant].memory
        assert again.variants[variant].aliases == first.variants[variant].aliases
    assert again.verdict == first.verdict


def test_concurrent_compiles_give_the_same_findings() -> None:
    call = prepare_call(
        pair_update, ({"u": zeros(), "v": zeros(32, 64)},), {}, donate=DonateSpec(), static=StaticSpec()
    )
    serial = compiled_variants(call)
    with ThreadPoolExecutor(max_workers=2) as pool:
        concurrent = compiled_variants(call, pool)
    for one, two in zip(serial, concurrent):
        assert one.memory == two.memory and one.inputs == two.inputs and one.outputs == two.outputs
        assert one.lowering_warnings == two.lowering_warnings
        assert hlo.parse_hlo_module(one.hlo_text).aliases == hlo.parse_hlo_module(two.hlo_text).aliases


# ----------------------------------------------------------------------------
# Outputs


def pair_update(s):
    u = s["u"].at[0].set(1.0)  # pair_update: u updated
    return u, s["v"]


def test_several_outputs_and_the_verdict_names_field_and_line() -> None:
    factory = lambda: ({"u": zeros(), "v": zeros(32, 64)},)  # noqa: E731
    donated = check_one(make_target(pair_update, factory))
    assert alias_pairs(donated) == [("s['u']", 0, "out[0]", 0), ("s['v']", 1, "out[1]", 1)]
    assert donated.verdict.in_place
    # without any donation: the verdict says which field is copied, and where
    result = check_one(make_target(pair_update, factory, donate="none"))
    assert not result.verdict.in_place
    copies = {f.input: f for f in result.verdict.findings if f.code == "parameter-copy"}
    line = line_of(pair_update, "# pair_update: u updated")
    finding = copies["s['u']"]
    assert finding.message.startswith(f"s['u'] is not donated and is copied (16.0 KiB) at {_display(__file__)}:{line}")
    assert finding.message.endswith(": donate it")
    assert finding.source == f"{_display(__file__)}:{line}"


def single_in_tuple(x):
    return (x * 2.0,)


def test_single_output_in_a_tuple() -> None:
    result = check_one(make_target(single_in_tuple, lambda: (zeros(),)))
    assert [o.path for o in result.outputs] == ["out[0]"]
    assert alias_pairs(result) == [("x", 0, "out[0]", 0)]


# ----------------------------------------------------------------------------
# Per-device figures (a separate process: the device count is fixed at jax start)

_SHARDED = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import NamedSharding, PartitionSpec as P
    from helpers_compile import make_target, check_reports
    mesh = jax.make_mesh((4,), ("x",))
    def f(u, v):
        return u * 2.0, v + 1.0
    spec = lambda s: jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, s))
    report = check_reports([make_target(f, lambda: (spec(P("x")), spec(P())))])
    print(json.dumps(report.to_dict()))
    """
)


def test_sharded_inputs_give_per_device_bytes() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), *sys.path]))
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", _SHARDED], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    [result] = json.loads(done.stdout)["results"]
    assert [i["bytes"] for i in result["inputs"]] == [KIB16, KIB16]  # global sizes
    aliases = result["variants"]["donated"]["aliases"]
    assert [(a["input"], a["bytes"]) for a in aliases] == [("u", KIB16 // 4), ("v", KIB16)]  # per device
    assert result["variants"]["donated"]["memory"]["alias_bytes"] == KIB16 // 4 + KIB16


# ----------------------------------------------------------------------------
# One broken target never hides the others


def test_unreadable_hlo_is_an_error_result_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.model.errors import TargetError

    from helpers_compile import check_reports

    real = hlo.parse_hlo_module

    def picky(text: str, parser: hlo.HloParser | None = None) -> hlo.HloModule:
        if "jit_to_bf16" in text.splitlines()[0]:
            raise hlo.HloParseError("an instruction this parser does not know")
        return real(text, parser)

    monkeypatch.setattr(hlo, "parse_hlo_module", picky)
    report = check_reports(
        [
            make_target(to_bf16, lambda: (zeros(),), name="bad"),
            ("missing.py:fn", TargetError("file 'missing.py' does not exist")),
            make_target(single_in_tuple, lambda: (zeros(),), name="good"),
        ]
    )
    bad, missing, good = report.results
    assert bad.status == "error" and bad.error.kind == "compile"
    assert "could not read the optimized HLO" in bad.error.message
    assert "does not know" in bad.error.message
    assert missing.status == "error" and missing.error.kind == "target"
    assert good.status == "ok" and good.verdict.in_place
    assert report.exit_code == 2


@pytest.mark.compile
def test_explicit_static_on_an_array_says_arrays_are_traced() -> None:
    from fieldmem.driver import prepare_call
    from fieldmem.model.errors import ArgumentsError

    def f(u, row):
        return u.at[0].set(row)

    args = (jnp.zeros((4, 4)), jnp.ones((4,)))
    with pytest.raises(ArgumentsError, match=r"--static names 'row'.*is an array.*leave it out of --static"):
        prepare_call(f, args, {}, donate=DonateSpec(), static=StaticSpec.parse("row"))


@pytest.mark.compile
def test_default_donation_of_a_plain_function_is_reported_as_all() -> None:
    def f(u):
        return u + 1.0

    result = check_one(make_target(f, lambda: (jnp.zeros((32, 32)),)))
    assert result.donate == "all"
    assert result.variants["donated"].donated_arguments == ("u",)


def test_timeline_peak_matches_live_peak(scan_result: Any) -> None:
    for variant in scan_result.variants.values():
        timeline = variant.timeline
        assert timeline is not None
        assert max(timeline.live_bytes) == variant.memory.live_peak_bytes
        assert timeline.live_bytes[timeline.positions.index(timeline.peak_position)] == variant.memory.live_peak_bytes
        assert timeline.length == len(timeline.positions)  # a short program is kept whole
        assert timeline.peak_instruction


def test_an_optimizer_sized_taken_list_names_three_outputs_and_counts_the_rest() -> None:
    """Eight same-sized outputs all taken: the reason names three and says how many more."""

    def step(a, b, c, d, e, f, g, h, extra):
        return a + extra, b + 1, c + 1, d + 1, e + 1, f + 1, g + 1, h + 1

    arrays = tuple(jnp.zeros((64, 64)) for _ in range(9))
    result = check_one(make_target(step, lambda: arrays))
    (unusable,) = result.variants["donated"].unusable_donations
    assert unusable.input == "extra" and unusable.code == "outputs-taken"
    assert unusable.reason.count("(reuses ") == 3
    assert unusable.reason.rstrip().endswith("and 5 more")
