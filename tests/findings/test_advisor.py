"""The donation advisor (``--suggest``) on real compiles of small functions.

What the advisor claims is checked against jax itself: an independent
``jax.jit(fn, donate_argnums=...)`` compile of the suggested spec must give the
footprint the suggestion reports (``memory_analysis()``), and running it must
hand each donated leaf's buffer to the output the suggestion names (buffer
pointers). Arrays are 64x64 f32 (16 KiB); compiles are shared through
module-scoped fixtures.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from rich.console import Console

from fieldmem.driver import PreparedCall, call_shape, compile_donation, prepare_call, start_variants
from fieldmem.findings.advisor import suggest
from fieldmem.findings.analysis import analyze_target
from fieldmem.model.advice import Suggestion
from fieldmem.model.errors import CompileError
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.render.suggest import suggestion_renderables
from fieldmem.request.spec import DonateSpec, StaticSpec

from helpers_compile import (
    UNUSABLE_WARNING,
    check_reports,
    compile_quietly,
    compiled_variants,
    constant_bytes,
    make_target,
    output_leaves,
    report_leaves,
    xla_memory,
)

pytestmark = pytest.mark.compile

N = 64
KIB16 = N * N * 4


def zeros(*shape: int, dtype: Any = jnp.float32) -> jax.Array:
    return jnp.zeros(shape or (N, N), dtype)


def advise(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    donate: Any = None,
    verify: Callable[..., Any] = compile_donation,
) -> tuple[PreparedCall, TargetResult, Suggestion]:
    """Check ``fn`` as the checker does (two compiles), then ask the advisor (verifying with ``verify``)."""
    kwargs = kwargs or {}
    spec = DonateSpec.parse(donate, "donate=") if donate is not None else DonateSpec()
    pending = start_variants(prepare_call(fn, args, kwargs, donate=spec, static=StaticSpec()), None)
    compiled = pending.result()
    call, plain, donated = pending.call, compiled[0].variant, compiled[1].variant  # the call compiled
    result = analyze_target(
        target="test",
        name="test",
        definition=None,
        donate=spec.describe(),
        expect="any",
        max_peak=None,
        plain=plain,
        donated=donated,
        min_bytes=1024,
    )

    def compile_with(positions: Any, names: Any, *, fast: bool = False) -> Any:
        return verify(call, positions, names, fast=fast)

    suggestion = suggest(call_shape(call), plain, donated, compile_donation=compile_with, result=result, min_bytes=1024)
    return call, result, suggestion


def footprint(compiled: Any) -> int:
    m = xla_memory(compiled)
    return m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] - m["alias_bytes"] + constant_bytes(compiled)


def by_argument(suggestion: Suggestion) -> dict[str, Any]:
    return {a.argument: a for a in suggestion.arguments}


# ----------------------------------------------------------------------------
# An undonated optimizer-style update: params, opt_state = step(params, opt_state, grads)


def sgd_step(params, opt_state, grads):
    velocity = jax.tree.map(lambda v, g: 0.9 * v + g, opt_state["velocity"], grads)
    params = jax.tree.map(lambda p, v: p - 0.01 * v, params, velocity)
    return params, {"velocity": velocity, "count": opt_state["count"] + 1}


def step_args() -> tuple[Any, ...]:
    params = {"w": zeros(), "b": zeros(N, 16)}
    opt_state = {"velocity": jax.tree.map(jnp.zeros_like, params), "count": jnp.int32(0)}
    grads = jax.tree.map(jnp.ones_like, params)
    return params, opt_state, grads


@pytest.fixture(scope="module")
def optimizer() -> tuple[PreparedCall, TargetResult, Suggestion]:
    return advise(sgd_step, step_args())


def test_optimizer_step_donates_params_and_opt_state_not_grads(optimizer: Any) -> None:
    _, _, suggestion = optimizer
    args = by_argument(suggestion)
    assert suggestion.spec == "params,opt_state"
    assert (args["params"].donate, args["opt_state"].donate, args["grads"].donate) == (True, True, False)
    assert args["grads"].code == "outputs-taken"
    assert all(leaf.code == "outputs-taken" for leaf in args["grads"].leaves)
    assert args["grads"].reason.startswith("every output of its leaves' sizes already reuses another donated argument")
    assert "already taken by another donated input: out[0]['w'] (reuses params['w'])" in args["grads"].leaves[1].reason
    assert suggestion.code == "jax.jit(sgd_step, donate_argnums=(0, 1))"
    assert suggestion.alternative_code == 'jax.jit(sgd_step, donate_argnames=("params", "opt_state"))'
    assert (suggestion.donate_argnums, suggestion.donate_argnames) == ((0, 1), ("params", "opt_state"))
    # every donation of the three arguments that could lend a buffer is measured: the check's two compiles
    # (none, and all of them) and six more; the marginals are read from those, with no compile of their own
    assert (suggestion.compiles, suggestion.tried, suggestion.verified_by, suggestion.searched) == (
        6,
        ("params", "opt_state", "grads", "params,opt_state", "params,grads", "opt_state,grads"),
        "suggested",
        True,
    )
    assert len(suggestion.measured) == 8 and suggestion.backend == "cpu"
    assert suggestion.summary.startswith("on cpu, donate params, opt_state: saves ")


def test_params_leaves_go_to_the_new_params(optimizer: Any) -> None:
    _, _, suggestion = optimizer
    params = by_argument(suggestion)["params"]
    assert [(leaf.input, leaf.output, leaf.code) for leaf in params.leaves] == [
        ("params['b']", "out[0]['b']", "reused"),
        ("params['w']", "out[0]['w']", "reused"),
    ]
    assert params.saved_bytes == sum(leaf.bytes for leaf in params.leaves) == KIB16 + N * 16 * 4


def test_independent_compile_saves_the_reported_bytes(optimizer: Any) -> None:
    _, _, suggestion = optimizer
    args = step_args()
    plain = compile_quietly(jax.jit(sgd_step), *args)
    donated = compile_quietly(jax.jit(sgd_step, donate_argnums=suggestion.donate_argnums), *args)
    assert suggestion.memory is not None
    assert footprint(donated) == suggestion.memory.footprint_bytes
    assert footprint(plain) - footprint(donated) == suggestion.savings["footprint_bytes"]
    # every donated leaf lends its buffer: the measured saving is what the arguments say
    saved = sum(a.saved_bytes for a in suggestion.arguments if a.donate)
    assert suggestion.savings["footprint_bytes"] == saved > 0
    assert xla_memory(donated)["alias_bytes"] == saved


def test_the_aliases_happen_at_run_time(optimizer: Any) -> None:
    call, result, suggestion = optimizer
    args = step_args()
    inputs = report_leaves(args, {}, list(call.positional_names))
    assert [path for path, _ in inputs] == [i.path for i in result.inputs]
    pointers = {path: leaf.unsafe_buffer_pointer() for path, leaf in inputs}
    leaves = dict(inputs)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=UNUSABLE_WARNING)  # the suggestion has no unusable donation
        out = jax.jit(sgd_step, donate_argnums=suggestion.donate_argnums)(*args)
    outputs = dict(output_leaves(out))
    reused = [leaf for a in suggestion.arguments if a.donate for leaf in a.leaves]
    assert len(reused) == 5
    for leaf in reused:
        assert leaf.code == "reused" and leaf.output is not None
        assert outputs[leaf.output].unsafe_buffer_pointer() == pointers[leaf.input], leaf
        assert leaves[leaf.input].is_deleted(), leaf
    assert not any(leaf.is_deleted() for path, leaf in inputs if path.startswith("grads"))


def test_the_donated_variant_is_reused_when_it_is_the_suggestion() -> None:
    _, _, suggestion = advise(sgd_step, step_args(), donate=("params", "opt_state"))
    assert suggestion.spec == "params,opt_state"
    # the check's donated compile is one of the donations measured: six more, no verification of its own
    assert (suggestion.compiles, suggestion.verified_by) == (6, "donated")
    assert "params,opt_state" not in suggestion.tried


# ----------------------------------------------------------------------------
# A jit object: the names form, and what its own donation left out


@partial(jax.jit, donate_argnames=("params",))
def jitted_step(params, opt_state, grads):
    return sgd_step(params, opt_state, grads)


def test_jit_object_with_donate_argnames_gets_the_names_form() -> None:
    _, result, suggestion = advise(jitted_step, step_args())
    assert result.variants["donated"].donated_arguments == ("params",)
    assert suggestion.code == 'jax.jit(jitted_step, donate_argnames=("params", "opt_state"))'
    assert suggestion.alternative_code == "jax.jit(jitted_step, donate_argnums=(0, 1))"
    # every donation measured, the jit's own (params) one of the check's: six compiles more
    assert suggestion.compiles == 6 and suggestion.verified_by == "suggested"
    assert "params" not in suggestion.tried and "params,opt_state" in suggestion.tried
    assert suggestion.savings["footprint_bytes"] > result.savings["footprint_bytes"] > 0


@partial(jax.jit, donate_argnames=("params", "opt_state"))
def well_jitted_step(params, opt_state, grads):
    return sgd_step(params, opt_state, grads)


def test_jit_object_whose_own_donation_is_best_costs_no_compile() -> None:
    _, _, suggestion = advise(well_jitted_step, step_args())
    assert suggestion.code == 'jax.jit(well_jitted_step, donate_argnames=("params", "opt_state"))'
    assert (suggestion.compiles, suggestion.verified_by) == (6, "donated")
    assert suggestion.notes[-1] == "the target's own jit donation already is this spec"


# ----------------------------------------------------------------------------
# Arguments that are not worth donating, and why


def cast_step(w, m, g):
    m = 0.9 * m + g
    return (w - 0.1 * m).astype(jnp.bfloat16), m


def test_dtype_change_gets_no_suggestion_for_that_argument() -> None:
    _, _, suggestion = advise(cast_step, (zeros(), zeros(), zeros()))
    args = by_argument(suggestion)
    assert suggestion.spec == "m"
    assert not args["w"].donate
    assert "out[0] has its shape but dtype bfloat16" in args["w"].reason
    assert "the dtype change prevents reuse" in args["w"].reason
    assert not args["g"].donate
    assert suggestion.savings["footprint_bytes"] == KIB16


def cast_only(w, g):
    return (w - 0.1 * g).astype(jnp.bfloat16)


def test_nothing_to_donate_costs_no_compile() -> None:
    _, _, suggestion = advise(cast_only, (zeros(), zeros()))
    assert suggestion.spec == "none" and suggestion.code is None
    assert (suggestion.compiles, suggestion.verified_by) == (0, "plain")
    assert {a.code for a in suggestion.arguments} == {"no-output-of-size"}
    assert suggestion.savings["footprint_bytes"] == 0
    assert suggestion.summary.startswith("on cpu, donate nothing: no argument's donation pays")


def scale_first(x, unused):
    return x * 2.0


def test_unused_argument_is_not_suggested() -> None:
    _, _, suggestion = advise(scale_first, (zeros(), zeros()))
    args = by_argument(suggestion)
    assert suggestion.spec == "x"
    assert args["unused"].code == "unused" and args["unused"].reason.startswith("unused: ")


def shifted(u):
    return jnp.roll(u, 1, axis=0)


def test_donation_that_saves_nothing_is_not_suggested() -> None:
    """XLA takes the buffer but computes the output into a temporary and copies it back."""
    _, result, suggestion = advise(shifted, (zeros(),))
    assert result.variants["donated"].aliases  # the check's donated variant does alias it
    [u] = suggestion.arguments
    assert (u.donate, u.code, u.saved_bytes) == (False, "via-temporary", 0)
    assert "temporary" in u.reason and "saves nothing" in u.reason
    assert suggestion.spec == "none" and suggestion.compiles == 0
    # and indeed: donating it does not lower the footprint
    plain = compile_quietly(jax.jit(shifted), zeros())
    donated = compile_quietly(jax.jit(shifted, donate_argnums=0), zeros())
    assert footprint(donated) >= footprint(plain)


def test_a_donation_measured_to_save_nothing_is_not_suggested() -> None:
    """Without a donated compile to learn from, u looks donatable; its compile shows it is not."""
    _, _, suggestion = advise(shifted, (zeros(),), donate="none")
    assert (suggestion.compiles, suggestion.tried) == (1, ("u",))
    assert suggestion.notes[0].startswith("the donations of the 1 argument(s) that could lend a buffer were measured")
    assert suggestion.notes[0].endswith("none saves footprint")
    assert suggestion.spec == "none" and suggestion.verified_by == "plain"
    assert suggestion.arguments[0].code == "via-temporary"


def test_a_prediction_the_verification_refutes_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the arguments whose every donation is measured, the advisor predicts; a prediction its
    verification compile refutes is dropped (here made so: u alone lends, and only a search is skipped)."""
    import fieldmem.findings.advisor as advisor

    monkeypatch.setattr(advisor, "EXHAUSTIVE_ARGUMENTS", 0)
    _, _, suggestion = advise(shifted, (zeros(),), donate="none")
    # the donation of every argument that could lend is compiled first, whatever the check donated
    assert (suggestion.compiles, suggestion.tried) == (1, ("u",))
    assert suggestion.spec == "none" and suggestion.verified_by == "plain"
    assert suggestion.arguments[0].code == "via-temporary"


# ----------------------------------------------------------------------------
# Static and keyword arguments in the code to write


def stepper(u, n_steps):
    return lax.scan(lambda c, _: (c * 0.5, None), u, None, length=n_steps)[0]


def test_static_arguments_are_written_into_the_code() -> None:
    # a scan's length must be concrete: n_steps is made static, and the code says so
    _, _, suggestion = advise(stepper, (zeros(), 3), donate="none")
    assert suggestion.code == "jax.jit(stepper, static_argnums=(1,), donate_argnums=(0,))"
    assert suggestion.alternative_code == 'jax.jit(stepper, static_argnames=("n_steps",), donate_argnames=("u",))'
    assert suggestion.compiles == 1 and suggestion.savings["footprint_bytes"] == KIB16


def traced_stepper(u, n_steps):
    return lax.fori_loop(0, n_steps, lambda i, c: c * 0.5, u)


def test_a_traced_python_int_is_not_written_static() -> None:
    # jax.jit traces n_steps (fori_loop takes a traced bound): the code is jax.jit's, without static_argnums
    _, _, suggestion = advise(traced_stepper, (zeros(), 3), donate="none")
    assert suggestion.code == "jax.jit(traced_stepper, donate_argnums=(0,))"
    assert suggestion.alternative_code == 'jax.jit(traced_stepper, donate_argnames=("u",))'


def keyword_update(x, *, state):
    return x + 1.0, {"s": state["s"] * 2.0}


def test_keyword_arguments_are_donated_by_name() -> None:
    _, _, suggestion = advise(keyword_update, (zeros(),), {"state": {"s": zeros(N, 32)}})
    assert suggestion.spec == "x,state"
    assert (suggestion.donate_argnums, suggestion.donate_argnames) == ((0,), ("x", "state"))
    assert suggestion.code == 'jax.jit(keyword_update, donate_argnums=(0,), donate_argnames=("state",))'
    assert by_argument(suggestion)["state"].position is None


# ----------------------------------------------------------------------------
# A verification that fails suggests nothing


def test_failed_verification_suggests_nothing() -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise CompileError("XLA compilation failed: out of memory")

    _, _, suggestion = advise(sgd_step, step_args(), verify=broken)
    # only the check's two compiles are measured: the best of them (every argument donated), never a guess
    assert suggestion.spec == "params,opt_state,grads" and suggestion.verified_by == "donated"
    assert not suggestion.searched and len(suggestion.measured) == 2
    assert sum("out of memory" in note for note in suggestion.notes) == 6


def test_failed_verification_of_a_prediction_suggests_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import fieldmem.findings.advisor as advisor

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise CompileError("XLA compilation failed: out of memory")

    monkeypatch.setattr(advisor, "EXHAUSTIVE_ARGUMENTS", 0)
    _, _, suggestion = advise(sgd_step, step_args(), verify=broken)
    assert suggestion.spec == "none" and suggestion.code is None and suggestion.verified_by == "none"
    assert "out of memory" in suggestion.notes[-1]
    assert suggestion.summary.startswith("on cpu, nothing suggested: ")


# ----------------------------------------------------------------------------
# The report: JSON round trip, old reports, rendering


def test_suggestion_survives_the_json_round_trip(optimizer: Any) -> None:
    import dataclasses

    _, _, suggestion = optimizer
    report = check_reports([make_target(scale_first, lambda: (zeros(), zeros()))])
    report = dataclasses.replace(report, results=(dataclasses.replace(report.results[0], suggestion=suggestion),))
    document = json.loads(json.dumps(report.to_dict()))
    assert document["results"][0]["suggestion"]["spec"] == "params,opt_state"
    assert Report.from_dict(document) == report
    # a report written before --suggest existed has no such key: it reads as None
    del document["results"][0]["suggestion"]
    assert Report.from_dict(document).results[0].suggestion is None


def render(items: list[Any]) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False)
    for item in items:
        console.print(item)
    return buffer.getvalue()


def test_suggestion_renders_the_code_and_each_argument(optimizer: Any) -> None:
    _, _, suggestion = optimizer
    short = render(suggestion_renderables(suggestion))
    assert "jax.jit(sgd_step, donate_argnums=(0, 1))" in short
    assert "✓ params saves 20.0 KiB" in short and "✗ grads: every output" in short
    verbose = render(suggestion_renderables(suggestion, verbose=True))
    assert "compiles added: 6" in verbose and "out[0]['w']" in verbose and "footprint_bytes" in verbose


def row_update(u, idx, row):
    return u.at[idx].set(row)


def test_small_arguments_are_counted_not_listed_unless_verbose() -> None:
    _, _, suggestion = advise(row_update, (zeros(), jnp.int32(3), zeros(N)))
    assert suggestion.spec == "u"
    assert [a.code for a in suggestion.arguments[1:]] == ["no-output-of-size"] * 2
    short = render(suggestion_renderables(suggestion, min_bytes=1024))
    assert "✗ idx" not in short and "✗ row" not in short
    assert "2 argument(s) under 1.0 KiB not donated (use -v)" in short
    verbose = render(suggestion_renderables(suggestion, verbose=True, min_bytes=1024))
    assert "✗ idx: no output has its size (4 B)" in verbose and "✗ row" in verbose


def test_the_advisor_does_not_parse_the_plain_hlo_again() -> None:
    """--suggest reads the plain variant the check already parsed: the parse is reused, not repeated."""
    from fieldmem.xla import hlo

    def update(u: jax.Array, row: jax.Array) -> jax.Array:
        return u.at[0].set(row)

    call = prepare_call(
        update, (jnp.zeros((64, 64)), jnp.ones(64)), {}, donate=DonateSpec.parse("none"), static=StaticSpec()
    )
    plain, donated = compiled_variants(call)
    result = analyze_target(
        target="t",
        name="t",
        definition=None,
        donate="none",
        expect="any",
        max_peak=None,
        plain=plain,
        donated=donated,
        min_bytes=0,
    )
    parser = hlo.HloParser()
    hlo.parse_hlo_module(plain.hlo_text, parser)  # as the check parsed it
    before = parser.parsed
    suggestion = suggest(
        call_shape(call),
        plain,
        donated,
        compile_donation=lambda positions, names, fast=False: compile_donation(call, positions, names, fast=fast),
        result=result,
        min_bytes=0,
        parser=parser,
    )
    assert suggestion.tried  # a verification compile was made, and parsed
    # the plain text is not parsed again: only the programs of the compiles the advisor added
    assert parser.parsed == before + len(suggestion.tried)


# ----------------------------------------------------------------------------
# What each suggested argument saves given the others (its marginal saving)


def three_step(u, v, w):
    return u * 3.0, v * 2.0, w.at[0].set(1.0)


def three_args() -> tuple[Any, ...]:
    return zeros(), zeros(N, 2 * N), zeros(N, 4 * N)


def test_each_argument_saves_what_the_suggestion_needs_more_without_it() -> None:
    _, _, suggestion = advise(three_step, three_args(), donate="none")
    assert suggestion.spec == "u,v,w"
    args = three_args()
    everything = footprint(compile_quietly(jax.jit(three_step, donate_argnums=(0, 1, 2)), *args))
    assert suggestion.memory is not None and suggestion.memory.footprint_bytes == everything
    for position, name in enumerate("uvw"):
        others = tuple(p for p in range(3) if p != position)
        without = footprint(compile_quietly(jax.jit(three_step, donate_argnums=others), *args))
        assert by_argument(suggestion)[name].marginal_bytes == without - everything > 0, name
    # every donation of the three measured: seven compiles (the check donated nothing), none more for the marginals
    assert suggestion.compiles == 7 and suggestion.tried == ("u", "v", "w", "u,v", "u,w", "v,w", "u,v,w")
    marginals = [a.marginal_bytes for a in suggestion.arguments]
    short = render(suggestion_renderables(suggestion))
    for a in suggestion.arguments:
        assert f"✓ {a.argument} saves {format_bytes(a.marginal_bytes)} given the others" in short
    # here they add up to the headline, so no note says otherwise
    assert sum(m for m in marginals if m is not None) == suggestion.savings["footprint_bytes"]
    assert not any("add up" in note for note in suggestion.notes)


def test_one_suggested_argument_saves_the_headline_and_costs_no_compile_more() -> None:
    def update(u, scale):
        return u.at[0].set(scale[0])

    _, _, suggestion = advise(update, (zeros(), zeros(8)), donate="none")
    assert suggestion.spec == "u" and suggestion.tried == ("u",)
    assert by_argument(suggestion)["u"].marginal_bytes == suggestion.savings["footprint_bytes"] > 0
    assert by_argument(suggestion)["scale"].marginal_bytes is None


def test_marginals_that_do_not_add_up_are_explained_in_a_note() -> None:
    from fieldmem.findings.donation_outcomes import DynamicArgument
    from fieldmem.findings.marginals import note_interactions

    chosen = [DynamicArgument("params", 0, ()), DynamicArgument("opt_state", 1, ())]
    notes: list[str] = []
    note_interactions(
        chosen, {"params": 5 * 2**20, "opt_state": 7 * 2**20}, {"footprint_bytes": 10 * 2**20}, notes, 1024
    )
    (note,) = notes
    assert "add up to 12.0 MiB, 2.0 MiB more than the 10.0 MiB donating them together saves" in note
    assert "interact" in note
    # a difference under --min-bytes is not worth a note; neither is a missing marginal
    quiet: list[str] = []
    note_interactions(
        chosen, {"params": 5 * 2**20, "opt_state": 5 * 2**20 + 64}, {"footprint_bytes": 10 * 2**20}, quiet, 1024
    )
    note_interactions(chosen, {"params": 5 * 2**20}, {"footprint_bytes": 10 * 2**20}, quiet, 1024)
    assert quiet == []


def test_a_suggestion_to_donate_an_array_given_twice_says_the_call_fails() -> None:
    """``add(x, x)``: donating x saves its buffer in the compile, but with these arguments jax refuses the
    call (one array given twice, one of them donated): the summary says so. Two arrays: it does not."""
    x = zeros()
    _, _, suggestion = advise(lambda u, g: u + g, (x, x), donate="none")
    assert suggestion.spec == "u"
    assert suggestion.summary.endswith(
        "but with these arguments the call fails: it gives u's array again as g, and jax refuses a call that "
        "donates a buffer it also reads; give it once first"
    )
    _, _, suggestion = advise(lambda u, g: u + g, (x, jnp.copy(x)), donate="none")
    assert suggestion.spec == "u" and "the call fails" not in suggestion.summary
