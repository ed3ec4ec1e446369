"""Arguments as ``jax.jit`` sees them: Python scalars traced, made static only where tracing needs their
value (and said), non-JAX leaves held static as ``equinox.filter_jit`` holds them, extended dtypes (typed
PRNG keys, float8, int4) read like any array, and readable names for pytrees without keys.

Each figure is checked against an independent ``jax.jit`` of the same function on the same arguments,
and each alias at run time (buffer pointers before and after the call, ``is_deleted()``).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax import lax

from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.checker import check_targets
from fieldmem.render import RenderOptions
from fieldmem.render.table import render
from fieldmem.request.options import CheckOptions

from helpers_compile import (
    CODE_SIZE,
    UNUSABLE_WARNING,
    check_one,
    check_reports,
    compile_quietly,
    make_target,
    xla_memory,
)

pytestmark = pytest.mark.compile


def figures(result: TargetResult, variant: str) -> dict[str, int | None]:
    memory = result.variants[variant].memory
    return {name: getattr(memory, name) for name in xla_memory_names()}


def xla_memory_names() -> list[str]:
    """The figures a static check copies from XLA: all but the code size, which its -O0 compile changes."""
    from fieldmem.driver import MEMORY_FIELDS

    return [name for name in MEMORY_FIELDS if name != CODE_SIZE]


def assert_figures_are_jits(result: TargetResult, args: tuple[Any, ...], fn: Any, **jit: Any) -> None:
    """Every memory_analysis() figure of both variants equals jax.jit's: plain without donation, donated with."""
    donate = jit.pop("donate_argnums", ())
    plain = xla_memory(compile_quietly(jax.jit(fn, **jit), *args))
    donated = xla_memory(compile_quietly(jax.jit(fn, donate_argnums=donate, **jit), *args))
    assert figures(result, "plain") == plain
    assert figures(result, "donated") == donated


def leaves_of(result: TargetResult) -> list[tuple[str, str, tuple[int, ...], int, bool]]:
    return [(i.path, i.dtype, i.shape, i.bytes, i.donated) for i in result.inputs]


def made_static(result: TargetResult) -> list[tuple[str, str]]:
    return [(m.argument, m.code) for m in result.made_static]


# ----------------------------------------------------------------------------
# Python scalars: traced, as jax.jit traces them


def poke(buf, row, vals):
    return buf.at[row].set(vals)


def poke_args() -> tuple[Any, ...]:
    return (jnp.zeros((16, 8)), 7, jnp.ones(8))


def test_a_python_int_is_traced_and_every_figure_is_jax_jits() -> None:
    result = check_one(make_target(poke, poke_args), min_bytes=0)
    # row is a weakly typed int32 leaf of the program, not donated (no buffer of the user's to reuse)
    assert leaves_of(result) == [
        ("buf", "float32", (16, 8), 512, True),
        ("row", "int32", (), 4, False),
        ("vals", "float32", (8,), 32, True),
    ]
    assert all(i.used for i in result.inputs) and result.made_static == ()
    assert_figures_are_jits(result, poke_args(), poke, donate_argnums=(0, 2))
    # the program jax.jit builds is not the one with row static: its arguments differ by row's 4 bytes
    static = xla_memory(compile_quietly(jax.jit(poke, static_argnums=1, donate_argnums=(0, 2)), *poke_args()))
    assert figures(result, "donated")["argument_bytes"] == static["argument_bytes"] + 4

    # at run time, jax.jit's program writes the row into buf's buffer and consumes buf
    buf, row, vals = poke_args()
    pointer = buf.unsafe_buffer_pointer()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        out = jax.jit(poke, donate_argnums=(0, 2))(buf, row, vals)
    [alias] = result.variants["donated"].aliases
    assert (alias.input, alias.output) == ("buf", "out")
    assert out.unsafe_buffer_pointer() == pointer and buf.is_deleted()


def test_a_donated_python_int_is_donated_as_jax_jit_donates_it() -> None:
    result = check_one(make_target(poke, poke_args, donate="buf,row"), min_bytes=0)
    assert [i.path for i in result.inputs if i.donated] == ["buf", "row"]
    assert_figures_are_jits(result, poke_args(), poke, donate_argnums=(0, 1))


@pytest.mark.parametrize("static", ["row", "1"])
def test_static_keeps_a_python_int_static(static: str) -> None:
    result = check_one(make_target(poke, poke_args, static=static), min_bytes=0)
    assert [i.path for i in result.inputs] == ["buf", "vals"]
    assert result.made_static == ()  # asked for, not made
    assert_figures_are_jits(result, poke_args(), poke, static_argnums=(1,), donate_argnums=(0, 2))


def mix(x, scale, flag, shift):
    return jnp.where(flag, x * scale, x) + jnp.real(shift)


def mix_args() -> tuple[Any, ...]:
    return (jnp.ones((8, 8)), 2.0, True, 1.5 + 0.5j)


def test_python_floats_bools_and_complex_are_traced() -> None:
    result = check_one(make_target(mix, mix_args), min_bytes=0)
    assert [(i.path, i.dtype, i.donated) for i in result.inputs] == [
        ("x", "float32", True),
        ("scale", "float32", False),
        ("flag", "bool", False),
        ("shift", "complex64", False),
    ]
    assert_figures_are_jits(result, mix_args(), mix, donate_argnums=(0,))


# ----------------------------------------------------------------------------
# Scalars tracing needs concrete: made static, said, and the rest still traced


def scan_length(x, n):
    return lax.scan(lambda c, _: (c * 0.5, None), x, None, length=n)[0]


def python_if(x, flag):
    return x * 2.0 if flag else x


def python_range(x, n):
    for _ in range(n):
        x = x * 0.5
    return x


def as_shape(x, n):
    return x + jnp.zeros((n, x.shape[1])).sum()


@pytest.mark.parametrize(
    ("fn", "value", "error"),
    [
        (scan_length, 3, "concrete"),
        (python_if, True, "TracerBoolConversionError"),
        (python_range, 3, "TracerIntegerConversionError"),
        (as_shape, 4, "Shapes must be 1D sequences of concrete values"),
    ],
    ids=["scan-length", "python-if", "range", "shape"],
)
def test_a_scalar_tracing_needs_concrete_is_made_static_and_said(fn: Any, value: Any, error: str) -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.ones((8, 8)), value)

    result = check_one(make_target(fn, args), min_bytes=0)
    argument = fn.__code__.co_varnames[1]
    assert [i.path for i in result.inputs] == ["x"]
    [made] = result.made_static
    assert (made.argument, made.code) == (argument, "concrete")
    assert error in made.reason  # jax's own error when it is traced
    [finding] = [f for f in result.verdict.findings if f.code == "made-static"]
    assert finding.severity == "info" and finding.input == argument and made.reason in finding.message
    assert_figures_are_jits(result, args(), fn, static_argnums=(1,), donate_argnums=(0,))


def scaled_scan(x, n, scale):
    return lax.scan(lambda c, _: (c * scale, None), x, None, length=n)[0]


def test_only_the_scalars_that_must_be_concrete_are_made_static() -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.ones((8, 8)), 3, 0.5)

    result = check_one(make_target(scaled_scan, args), min_bytes=0)
    assert made_static(result) == [("n", "concrete")]
    assert [i.path for i in result.inputs] == ["x", "scale"]
    assert_figures_are_jits(result, args(), scaled_scan, static_argnums=(1,), donate_argnums=(0,))


def configured(x, config):
    return lax.scan(lambda c, _: (c * config["w"], None), x, None, length=config["n"])[0] * config["scale"]


def test_a_scalar_inside_a_pytree_is_held_static_alone() -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.ones((8, 8)), {"n": 3, "scale": 2.0, "w": jnp.full((8,), 0.5)})

    result = check_one(make_target(configured, args), min_bytes=0)
    assert made_static(result) == [("config['n']", "concrete")]
    assert [(i.path, i.dtype) for i in result.inputs] == [
        ("x", "float32"),
        ("config['scale']", "float32"),
        ("config['w']", "float32"),
    ]

    # the same program written by hand: n closed over, the rest traced
    def by_hand(x, scale, w):
        return configured(x, {"n": 3, "scale": scale, "w": w})

    x, config = args()
    hand = (x, config["scale"], config["w"])
    plain = xla_memory(compile_quietly(jax.jit(by_hand), *hand))
    donated = xla_memory(compile_quietly(jax.jit(by_hand, donate_argnums=(0, 1, 2)), *hand))
    assert figures(result, "plain") == plain and figures(result, "donated") == donated


def test_a_jit_object_is_never_altered() -> None:
    # the user's own jit traces n, and so fails: fieldmem says so rather than analyse another program
    jitted = jax.jit(scan_length, donate_argnums=(0,))
    report = check_reports([make_target(jitted, lambda: (jnp.ones((8, 8)), 3))])
    [result] = report.results
    assert result.status == "error" and result.error is not None
    assert "tracing/lowering failed" in result.error.message


def broken(x, n):
    return (x @ jnp.ones((3, 5))) * n


def test_an_error_the_scalars_do_not_cause_is_reported_as_it_is() -> None:
    report = check_reports([make_target(broken, lambda: (jnp.ones((4, 4)), 2))])
    [result] = report.results
    assert result.status == "error" and result.error is not None
    assert result.error.message.startswith("tracing/lowering failed: TypeError: dot_general")


# ----------------------------------------------------------------------------
# Leaves that are no JAX type: held static, as equinox.filter_jit holds them


def mlp_step(model, x):
    def loss_fn(m):
        return jnp.mean(jax.vmap(m)(x) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    return eqx.apply_updates(model, jax.tree_util.tree_map(lambda g: -0.1 * g, grads)), loss


def mlp_args() -> tuple[Any, ...]:
    return (eqx.nn.MLP(4, 4, 16, 2, key=jax.random.key(0)), jnp.ones((8, 4)))


def test_an_equinox_mlp_holding_its_activation_is_analysed_with_its_weights_aliased() -> None:
    result = check_one(make_target(mlp_step, mlp_args), min_bytes=0)
    assert made_static(result) == [("model.activation", "not-traceable"), ("model.final_activation", "not-traceable")]
    assert "equinox.filter_jit" in result.made_static[0].reason
    weights = [i.path for i in result.inputs if i.path.startswith("model.")]
    assert weights == [f"model.layers[{n}].{p}" for n in range(3) for p in ("weight", "bias")]
    assert [o.path for o in result.outputs] == [
        f"out[0].layers[{n}].{p}" for n in range(3) for p in ("weight", "bias")
    ] + ["out[1]"]

    # the same program as filter_jit splits it, written by hand with equinox
    model, x = mlp_args()
    params, static = eqx.partition(model, eqx.is_array)

    def split_step(p, x):
        new, loss = mlp_step(eqx.combine(p, static), x)
        return eqx.filter(new, eqx.is_array), loss

    assert_figures_are_jits(result, (params, x), split_step, donate_argnums=(0, 1))

    # every alias the report claims happens at run time
    aliases = result.variants["donated"].aliases
    assert {a.input for a in aliases} == set(weights)
    inputs = {"model" + jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
    pointers = {path: leaf.unsafe_buffer_pointer() for path, leaf in inputs.items()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        out = jax.jit(split_step, donate_argnums=(0, 1))(params, x)
    outputs = {"out" + jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(out)[0]}
    for alias in aliases:
        assert outputs[alias.output].unsafe_buffer_pointer() == pointers[alias.input], alias
        assert inputs[alias.input].is_deleted(), alias


def tagged(x, meta, tags):
    return x * meta["w"] if meta["name"] == "adam" and tags[0] == "a" else x


def test_strings_functions_and_none_in_a_pytree_are_held_static() -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.ones((8, 8)), {"w": jnp.ones(8), "name": "adam", "f": jnp.tanh, "nothing": None}, ["a", "b"])

    result = check_one(make_target(tagged, args), min_bytes=0)
    assert [i.path for i in result.inputs] == ["x", "meta['w']"]
    assert made_static(result) == [
        ("meta['f']", "not-traceable"),
        ("meta['name']", "not-traceable"),
        ("tags[0]", "not-traceable"),
        ("tags[1]", "not-traceable"),
    ]
    assert not [f for f in result.verdict.findings if f.code == "made-static"]  # only concrete scalars are findings


# ----------------------------------------------------------------------------
# Extended dtypes: typed PRNG keys, float8, int4


def langevin(x, key):
    key, noise = jax.random.split(key)
    return x - 0.01 * x + 0.1 * jax.random.normal(noise, x.shape), key


def langevin_args() -> tuple[Any, ...]:
    return (jnp.zeros((16, 16)), jax.random.key(0))


def test_a_typed_key_update_is_analysed_with_its_arrays_aliased() -> None:
    report = check_targets([make_target(langevin, langevin_args)], CheckOptions(min_bytes=0, run=True))
    [result] = report.results
    assert result.status == "ok", result.error
    assert leaves_of(result) == [("x", "float32", (16, 16), 1024, True), ("key", "key<fry>", (), 8, True)]
    assert [(o.path, o.dtype, o.bytes) for o in result.outputs] == [
        ("out[0]", "float32", 1024),
        ("out[1]", "key<fry>", 8),
    ]
    aliases = [(a.input, a.output, a.bytes) for a in result.variants["donated"].aliases]
    assert aliases == [("x", "out[0]", 1024), ("key", "out[1]", 8)]
    assert_figures_are_jits(result, langevin_args(), langevin, donate_argnums=(0, 1))
    assert all(check.confirmed for check in result.variants["donated"].run.aliases)

    # independently: jax.jit's program puts x and the key in their own buffers, and consumes both
    x, key = langevin_args()
    before = (x.unsafe_buffer_pointer(), key.unsafe_buffer_pointer())
    new_x, new_key = jax.jit(langevin, donate_argnums=(0, 1))(x, key)
    assert (new_x.unsafe_buffer_pointer(), new_key.unsafe_buffer_pointer()) == before
    assert x.is_deleted() and key.is_deleted()


def split_keys(keys):
    return jax.vmap(lambda k: jax.random.split(k)[0])(keys)


def test_a_batch_of_keys_counts_two_uint32_per_key() -> None:
    def args() -> tuple[Any, ...]:
        return (jax.random.split(jax.random.key(1), 4),)

    result = check_one(make_target(split_keys, args), min_bytes=0)
    assert leaves_of(result) == [("keys", "key<fry>", (4,), 32, True)]
    assert result.variants["plain"].memory.argument_bytes == 32
    assert_figures_are_jits(result, args(), split_keys, donate_argnums=(0,))


def narrow(a, b):
    return (a.astype(jnp.float32) * 2.0).astype(jnp.float8_e4m3fn), b


def test_float8_and_int4_leaves_are_sized_as_xla_stores_them() -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.zeros((64,), jnp.float8_e4m3fn), jnp.zeros((64,), jnp.int4))

    result = check_one(make_target(narrow, args), min_bytes=0)
    # int4 is packed two to a byte
    assert leaves_of(result) == [("a", "float8_e4m3fn", (64,), 64, True), ("b", "int4", (64,), 32, True)]
    assert [(o.dtype, o.bytes) for o in result.outputs] == [("float8_e4m3fn", 64), ("int4", 32)]
    donated = result.variants["donated"]
    assert sum(i.bytes for i in result.inputs) == donated.memory.argument_bytes
    assert [(a.input, a.bytes) for a in donated.aliases] == [("a", 64), ("b", 32)]
    assert sum(a.bytes for a in donated.aliases) == donated.memory.alias_bytes
    assert_figures_are_jits(result, args(), narrow, donate_argnums=(0, 1))


# ----------------------------------------------------------------------------
# Names of the leaves of pytrees without keys


class Pair:
    """A pytree node registered without keys (as many library containers are)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


jax.tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, children: Pair(*children))


def relax(t, x_initial):
    inner = x_initial[1]
    return (t, [Pair(inner[0].a * 0.5, inner[0].b)])


def test_leaves_of_pytrees_without_keys_have_readable_names() -> None:
    def args() -> tuple[Any, ...]:
        return (jnp.zeros(()), (jnp.zeros(2), [Pair(jnp.zeros(8), jnp.ones(8))]))

    result = check_one(make_target(lambda t, x_initial: relax(t, x_initial), args), min_bytes=0)
    assert [i.path for i in result.inputs] == ["t", "x_initial[0]", "x_initial[1][0][0]", "x_initial[1][0][1]"]
    assert [o.path for o in result.outputs] == ["out[0]", "out[1][0][0]", "out[1][0][1]"]
    assert all("flat index" not in path for path in [i.path for i in result.inputs] + [o.path for o in result.outputs])


# ----------------------------------------------------------------------------
# The report: JSON, read back, and the table


def test_made_static_is_in_the_json_read_back_and_in_the_verbose_table() -> None:
    report = check_reports(
        [make_target(scan_length, lambda: (jnp.ones((8, 8)), 3)), make_target(mlp_step, mlp_args, name="test:mlp")]
    )
    document = json.loads(json.dumps(report.to_dict()))
    [scan, mlp] = document["results"]
    assert [(m["argument"], m["code"]) for m in scan["made_static"]] == [("n", "concrete")]
    assert scan["made_static"][0]["reason"]
    assert [m["code"] for m in mlp["made_static"]] == ["not-traceable", "not-traceable"]
    assert Report.from_dict(document) == report
    # a report written before the field existed still reads
    del document["results"][0]["made_static"]
    assert Report.from_dict(document).results[0].made_static == ()

    verbose = render(report, RenderOptions(verbose=True, width=400))
    assert "n is held static: jax.jit traces it, and tracing needs its value" in verbose
    assert "held static: model.activation: a function is no JAX type" in verbose
    assert "held static: model.activation" not in render(report, RenderOptions(width=400))
