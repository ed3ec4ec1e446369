"""Library jit wrappers: fieldmem analyses the program the wrapper compiles, with the wrapper's donation.

``flax.nnx.jit`` (model and optimizer updated in place), ``equinox.filter_jit`` in each ``donate=`` mode,
a ``jax.jit`` method reached through an instance and a ``functools.partial`` of a jit, each checked
against runtime truth: the user's own wrapper is called on fresh arguments and every alias fieldmem
reports must show as the same buffer pointer before and after, the input deleted. Wrappers fieldmem
cannot map are refused in one line. Steps live in tests/assets/wrapped_steps.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
import pytest
from test_peaks_truth import assert_adds_up
from typer.testing import CliRunner

from fieldmem.driver import prepare_call
from fieldmem.frontends.cli import app
from fieldmem.model.errors import DonationError, TargetError
from fieldmem.request.definitions import definition_of
from fieldmem.request.spec import DonateSpec, StaticSpec

from helpers_compile import check_one, compiled_variants, make_target


def _load_steps() -> Any:
    """tests/assets/wrapped_steps.py, loaded without putting tests/assets on sys.path (other tests check
    that a module outside the path is not found)."""
    spec = importlib.util.spec_from_file_location("_wrapped_steps_under_test", ASSETS / "wrapped_steps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ASSETS = Path(__file__).parents[1] / "assets"
w = _load_steps()

pytestmark = pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")


def prepared(fn: Any, args: tuple, donate: str | None = None) -> Any:
    spec = DonateSpec.parse(donate, "donate=") if donate is not None else DonateSpec()
    return prepare_call(fn, args, {}, donate=spec, static=StaticSpec())


def pointers(named: dict[str, Any]) -> dict[str, int]:
    return {path: leaf.unsafe_buffer_pointer() for path, leaf in named.items()}


# ---- flax.nnx.jit -------------------------------------------------------------------------------------


def nnx_arrays(model: Any, optimizer: Any) -> dict[str, Any]:
    """Every array of the model and the optimizer under the user's path (``model.l1.kernel``)."""
    from flax import nnx

    found = {}
    for name, node in (("model", model), ("optimizer", optimizer)):
        _, state = nnx.split(node)
        for path, variable in nnx.to_flat_state(state):
            text = "".join(f".{k}" if isinstance(k, str) else f"[{k}]" for k in path)
            found[name + text] = variable.get_raw_value()
    return found


def assert_peak_placed(result: Any, argument_roots: set[str]) -> None:
    """Issue 31 on a real-library step: the peak by source adds up (test_peaks_truth.assert_adds_up) and every
    argument's bytes are under one of the step's own arguments."""
    for variant in result.variants.values():
        assert_adds_up(variant)
        for source in variant.peak.sources:
            if source.kind == "argument":
                assert any(source.input.startswith(root) for root in argument_roots), source.input


@pytest.mark.compile
def test_nnx_adam_step_updates_model_and_optimizer_in_place() -> None:
    result = check_one(make_target(w.nnx_step, w.nnx_args), min_bytes=0)
    donated = result.variants["donated"]
    assert donated.donated_arguments == ("model", "optimizer")
    assert not result.variants["plain"].aliases
    aliased = {a.input: a.output for a in donated.aliases}
    model, optimizer, x, y = w.nnx_args()
    state = nnx_arrays(model, optimizer)
    kernels = [p for p in state if p.endswith(".kernel")]
    assert {"model.l1.kernel", "optimizer.opt_state[0].mu.l1.kernel", "optimizer.opt_state[0].nu.l2.kernel"} <= set(
        kernels
    )
    for path in state:  # every parameter and adam moment (and the counters) is updated in place
        assert aliased.get(path) == path, (path, aliased)
    assert not donated.unusable_donations
    assert {i.path for i in result.inputs} == set(state) | {"x", "y"}
    assert [o.path for o in result.outputs][-1] == "out"  # the loss, a new output
    assert_peak_placed(result, {"model.", "optimizer.", "x", "y"})

    # runtime truth: the user's own nnx.jit, called on fresh arguments
    before = dict(state)
    taken = pointers(before)
    w.nnx_step(model, optimizer, x, y)
    after = nnx_arrays(model, optimizer)
    for alias in donated.aliases:
        assert after[alias.output].unsafe_buffer_pointer() == taken[alias.input], alias
        assert before[alias.input].is_deleted(), alias
    assert not x.is_deleted() and not y.is_deleted()


@pytest.mark.compile
def test_a_copy_the_compiler_chose_says_so_and_the_buffer_is_still_reused() -> None:
    """An nnx adamw step: XLA:CPU keeps a copy of model.l2.kernel although nothing reads its old value after
    the update. The finding says whose choice it is instead of advising a change to the code, and names what
    the user can do (another backend); it does not fail --expect in-place; the kernel's buffer is still reused
    at run time."""
    result = check_one(make_target(w.nnx_adamw_step, w.nnx_adamw_args), min_bytes=1024)
    donated = result.variants["donated"]
    copied = [c for c in donated.copies if c.kind == "parameter" and c.of_parameter == "model.l2.kernel"]
    assert copied, donated.copies
    (finding,) = [f for f in result.verdict.findings if f.code == "compiler-copy" and f.input == "model.l2.kernel"]
    assert finding.severity == "warning" and finding.message.startswith("XLA:CPU still copies model.l2.kernel")
    assert "the compiler's choice of order, not a line to change" in finding.message
    assert "--backend gpu:h100" in finding.message and "read it before updating" not in finding.message
    # the code does all it can: in place as written (--expect in-place passes), the copy still counted
    assert result.verdict.kind == "in-place-as-written" and result.verdict.in_place
    assert result.verdict.summary.startswith("in place as written; XLA:CPU still copies")
    assert {a.input: a.output for a in donated.aliases}["model.l2.kernel"] == "model.l2.kernel"

    model, optimizer, x, y = w.nnx_adamw_args()
    before = nnx_arrays(model, optimizer)["model.l2.kernel"]
    pointer = before.unsafe_buffer_pointer()
    w.nnx_adamw_step(model, optimizer, x, y)
    after = nnx_arrays(model, optimizer)["model.l2.kernel"]
    assert before.is_deleted() and after.unsafe_buffer_pointer() == pointer


@pytest.mark.compile
def test_nnx_donated_variant_is_the_program_nnx_jit_compiles() -> None:
    args = w.nnx_args()
    plain, donated = compiled_variants(prepared(w.nnx_step, args))
    assert donated.hlo_text == w.nnx_step.lower(*args).compile().as_text()
    assert "input_output_alias" not in plain.hlo_text.split("\n", 1)[0]


@pytest.mark.compile
def test_nnx_jit_without_donation_donates_nothing_unless_asked() -> None:
    args = w.nnx_args()
    _, auto = compiled_variants(prepared(w.nnx_step_undonated, args))
    assert auto.donated_arguments == () and not any(leaf.donated for leaf in auto.inputs)
    _, donated = compiled_variants(prepared(w.nnx_step_undonated, args, donate="model"))
    assert donated.donated_arguments == ("model",)
    assert {leaf.path for leaf in donated.inputs if leaf.donated} == {
        "model.l1.bias",
        "model.l1.kernel",
        "model.l2.bias",
        "model.l2.kernel",
    }


# ---- equinox.filter_jit -------------------------------------------------------------------------------

# which of (opt_state, model, x, y) each donate= mode donates
EQX_DONATES = {
    "all": {"opt_state", "model", "x", "y"},
    "warn": {"opt_state", "model", "x", "y"},
    "all-except-first": {"model", "x", "y"},
    "warn-except-first": {"model", "x", "y"},
    "none": set(),
}


def eqx_weights(model: Any, prefix: str) -> dict[str, Any]:
    return {
        prefix + jax.tree_util.keystr(p): leaf
        for p, leaf in jax.tree_util.tree_flatten_with_path(model)[0]
        if isinstance(leaf, jax.Array)
    }


@pytest.mark.compile
@pytest.mark.parametrize("mode", w.EQX_MODES)
def test_eqx_filter_jit_donates_what_its_mode_donates(mode: str) -> None:
    _, donated = compiled_variants(prepared(w.eqx_steps[mode], w.eqx_args()))
    assert {leaf.argument for leaf in donated.inputs if leaf.donated} == EQX_DONATES[mode]
    assert set(donated.donated_arguments) == EQX_DONATES[mode]
    assert {leaf.argument for leaf in donated.inputs} == {"opt_state", "model", "x", "y"}  # never "<flat index>"
    assert all("filter_jit" not in leaf.path and "flat index" not in leaf.path for leaf in donated.inputs)
    assert donated.outputs[0].path == "filter_jit's marker"
    assert "out[0].layers[0].weight" in {o.path for o in donated.outputs}


@pytest.mark.compile
def test_eqx_mlp_step_aliases_the_weights() -> None:
    """An eqx.nn.MLP holds a function leaf (activation): filter_jit keeps it static, and so does fieldmem."""
    result = check_one(make_target(w.eqx_step, w.eqx_args), min_bytes=0)
    donated = result.variants["donated"]
    aliased = {a.input: a.output for a in donated.aliases}
    opt_state, model, x, y = w.eqx_args()
    weights = eqx_weights(model, "model")
    assert weights and all(aliased.get(p) == "out[0]" + p[len("model") :] for p in weights), aliased
    assert not any(a.input.startswith("opt_state") for a in donated.aliases)  # all-except-first keeps it
    assert_peak_placed(result, {"model.", "opt_state", "x", "y"})

    taken = pointers(weights)
    new_model, _ = w.eqx_step(opt_state, model, x, y)
    after = eqx_weights(new_model, "out[0]")
    for alias in donated.aliases:
        if alias.input in weights:
            assert after[alias.output].unsafe_buffer_pointer() == taken[alias.input], alias
            assert weights[alias.input].is_deleted(), alias
    assert not any(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(opt_state))


def test_eqx_filter_jit_refuses_argument_donations() -> None:
    with pytest.raises(DonationError, match=r"equinox\.filter_jit"):
        prepared(w.eqx_step, w.eqx_args(), donate="model")


# ---- jitted methods and partials ----------------------------------------------------------------------


@pytest.mark.compile
def test_jitted_method_through_an_instance_with_its_own_donation() -> None:
    result = check_one(make_target(w.solver.advance, w.stepper_args), min_bytes=0)
    donated = result.variants["donated"]
    assert donated.donated_arguments == ("f",)
    assert [(a.input, a.output) for a in donated.aliases] == [("f", "out")]
    f, timestep = w.stepper_args()
    taken = f.unsafe_buffer_pointer()
    out = w.solver.advance(f, timestep)
    assert out.unsafe_buffer_pointer() == taken and f.is_deleted()


@pytest.mark.compile
def test_partial_of_a_jit_keeps_the_jit_donation() -> None:
    result = check_one(make_target(w.scaled_update, w.scaled_args), min_bytes=0)
    donated = result.variants["donated"]
    assert donated.donated_arguments == ("u",)
    assert [(a.input, a.output) for a in donated.aliases] == [("u", "out")]
    u, v = w.scaled_args()
    taken = u.unsafe_buffer_pointer()
    out = w.scaled_update(u, v)
    assert out.unsafe_buffer_pointer() == taken and u.is_deleted() and not v.is_deleted()


# ---- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("logged", "wraps a jax.jit"),
        ("sharded", "jax.shard_map around a jax.jit never reuses your buffers"),
        ("nnx_tree_jit", "flax.nnx.jit(graph=False"),
        ("custom", "wrapped_steps_under_test.Custom"),
    ],
)
def test_wrappers_fieldmem_cannot_map_are_refused_in_one_line(name: str, words: str) -> None:
    with pytest.raises(TargetError) as caught:
        prepared(getattr(w, name), w.one_array())
    message = str(caught.value)
    assert words in message and "\n" not in message


def test_definitions_of_wrappers_point_at_the_users_def() -> None:
    for fn, name in [
        (w.nnx_step, "nnx_step"),
        (w.eqx_step, "_eqx_update"),
        (w.solver.advance, "_advance"),
        (w.scaled_update, "_scaled_update"),
    ]:
        where = definition_of(fn)
        assert where is not None and "wrapped_steps.py:" in where, fn
        line = int(where.rsplit(":", 1)[1])
        text = Path(w.__file__).read_text().splitlines()[line - 1 : line + 1]
        assert any(f"def {name}(" in t or "@" in t for t in text), (where, text)


# ---- the CLI ------------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.mark.compile
def test_cli_instance_method_and_an_unknown_wrapper(in_assets: Path) -> None:
    result = runner.invoke(
        app,
        [
            "check",
            "wrapped_steps:solver.advance",
            "wrapped_steps:custom",
            "--args",
            "wrapped_steps:stepper_args",
            "--min-bytes",
            "0",
            "--format",
            "json",
        ],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    results = {r["name"]: r for r in json.loads(result.stdout)["results"]}
    advance = results["wrapped_steps:solver.advance"]
    assert advance["status"] == "ok"
    assert advance["variants"]["donated"]["donated_arguments"] == ["f"]
    assert [(a["input"], a["output"]) for a in advance["variants"]["donated"]["aliases"]] == [("f", "out")]
    refused = results["wrapped_steps:custom"]
    assert refused["status"] == "error" and refused["error"]["kind"] == "target"
    assert "wrapped_steps.Custom is a compiled-function wrapper" in refused["error"]["message"]


@pytest.mark.compile
def test_cli_nnx_step(in_assets: Path) -> None:
    with warnings.catch_warnings():
        result = runner.invoke(
            app,
            ["check", "wrapped_steps:nnx_step", "--args", "wrapped_steps:nnx_args", "--expect", "in-place"],
            env={"COLUMNS": "160"},
        )
    assert result.exit_code == 0, result.output
    assert "model, optimizer" in result.stdout and "in place" in result.stdout


@pytest.mark.compile
def test_a_wrappers_outputs_are_what_it_returns() -> None:
    """What a chain passes on is what the wrapper returns (eqx: arrays and static part combined; nnx: the
    function's own return value), not the inner program's plumbing."""
    from fieldmem.driver import start_variants

    _, donated = start_variants(prepared(w.eqx_step, w.eqx_args()), None).result()
    model, opt_state = donated.outputs
    assert model.layers[0].weight.shape == (8, 4) and isinstance(model.layers[0].weight, jax.ShapeDtypeStruct)
    assert model.activation is jax.nn.relu
    assert jax.tree_util.tree_structure(opt_state) == jax.tree_util.tree_structure(w.eqx_args()[0])
    _, donated = start_variants(prepared(w.nnx_step, w.nnx_args()), None).result()
    assert isinstance(donated.outputs, jax.ShapeDtypeStruct) and donated.outputs.shape == ()


@pytest.mark.compile
def test_nnx_state_written_to_a_new_buffer_names_its_own_input() -> None:
    """Donating the model only: the optimizer's moments get new buffers, and the finding names the
    moment's own input (not donated) rather than another leaf of its size."""
    result = check_one(make_target(w.nnx_step_undonated, w.nnx_args, donate="model"), min_bytes=0)
    assert result.verdict is not None
    messages = [f.message for f in result.verdict.findings if f.output == "optimizer.opt_state[0].mu.l1.kernel"]
    assert messages, result.verdict.findings
    assert "optimizer.opt_state[0].mu.l1.kernel has its size but is not donated: donate optimizer" in messages[0]


@pytest.mark.compile
def test_suggest_on_wrappers() -> None:
    from fieldmem.parent.checker import check_targets
    from fieldmem.request.options import CheckOptions

    options = CheckOptions(min_bytes=0, suggest=True)
    eqx_result, nnx_result = check_targets(
        [make_target(w.eqx_step_none, w.eqx_args), make_target(w.nnx_step_undonated, w.nnx_args)], options
    ).results
    assert eqx_result.suggestion is not None and "equinox.filter_jit" in eqx_result.suggestion.summary
    assert eqx_result.variants["donated"].aliases == ()  # donate="none": nothing donated, and nothing "dropped"
    assert eqx_result.verdict is not None and "dropped" not in eqx_result.verdict.summary
    assert nnx_result.suggestion is not None and nnx_result.suggestion.code is not None
    assert nnx_result.suggestion.code.startswith("nnx.jit(nnx_step_undonated, donate_argnames=(")


def test_a_chain_spreads_into_a_jitted_method_without_its_instance() -> None:
    """``solver.relax(state)`` takes one argument: a chain hands it a tuple whole (``self`` is not one)."""
    from fieldmem.driver import spread

    pair = (jax.ShapeDtypeStruct((2,), "float32"), jax.ShapeDtypeStruct((2,), "float32"))
    assert spread(pair, w.solver.relax) == (pair,)
    assert spread(pair, w.solver.advance) == pair


def test_a_users_decorator_around_a_plain_function_is_not_refused() -> None:
    call = prepared(w.decorated_update, w.one_array())
    # prepared as a plain function: the program jax.jit(decorated_update) traces
    assert call.wrapper is None and call.user_jit is None
    assert call.function.__wrapped__ is w.decorated_update  # type: ignore[attr-defined]


@pytest.mark.compile
def test_cli_run_confirms_the_nnx_aliases(in_assets: Path) -> None:
    """--run calls the compiled program on fresh buffers (in a worker process): every alias holds."""
    result = runner.invoke(
        app,
        ["check", "wrapped_steps:nnx_step", "--args", "wrapped_steps:nnx_args", "--run", "--format", "json"],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)["results"]
    run = report["variants"]["donated"]["run"]
    checks = {(a["input"], a["output"]): a["confirmed"] for a in run["aliases"]}
    assert len(checks) == 14 and all(checks.values()), checks
    assert checks[("optimizer.opt_state[0].mu.l1.kernel", "optimizer.opt_state[0].mu.l1.kernel")]
