"""Update chains: ``pkg.mod:a,b,c``, ``fieldmem.chain(...)``, per-step checks, hand-offs, steps vs fused.

The examples are checked once per module (real compiles) and their figures
held against plain ``jax.jit`` compiles of each step made here; the verdict
logic (``fieldmem.findings.chains``) is also tested on hand-built results, with no
compile, for the cases the examples do not reach (a reshard, a failed step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

import fieldmem
from fieldmem.driver import compose, spread
from fieldmem.findings.chains import StepOutcome, analyze_chain
from fieldmem.frontends.cli import app
from fieldmem.model.copies import Alias
from fieldmem.model.errors import OptionError
from fieldmem.model.report import Report
from fieldmem.model.target import InputInfo, OutputInfo, TargetResult
from fieldmem.model.verdict import Finding
from fieldmem.parent.checker import check, check_targets
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import ChainTarget, TargetOptions, resolve_target

from factories import KIB, make_input, make_memory, make_output, make_report, make_result, make_variant
from helpers_compile import compile_quietly, xla_memory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FORWARD = str(EXAMPLES / "forward.py")
PRECISION = str(EXAMPLES / "precision_chain.py")


def _line_of(path: str, text: str) -> int:
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


# ---------------------------------------------------------------------------
# The examples, compiled once


@pytest.fixture(scope="module")
def chain_report() -> Report:
    return check([FORWARD, PRECISION], options=CheckOptions(min_bytes=1024))


def _chain(report: Report, name: str) -> Any:
    return next(c for c in report.chains if c.name == name)


def _results(report: Report) -> dict[str, TargetResult]:
    return {r.name: r for r in report.results}


@pytest.mark.compile
def test_seed_forward_chain_is_in_place_and_create_field_only_grows(chain_report: Report) -> None:
    chain = _chain(chain_report, "forward:chain")
    assert [s.function for s in chain.steps] == ["create_field", "update1", "update2"]
    assert [s.status for s in chain.steps] == ["grows", "in-place", "in-place"]
    assert chain.in_place and chain.first_break is None
    assert chain.summary.startswith("in place along all 3 steps")
    assert [c.name for c in chain.checks] == ["expect-in-place"] and chain.checks[0].passed
    # each step is a result of its own, and the fused chain one more
    results = _results(chain_report)
    for step in chain.steps:
        assert results[step.result].status == "ok"
    assert chain.fused == "forward:chain[fused]" and results[chain.fused].status == "ok"
    # create_field reuses x for u and allocates v: exactly what the state grows by
    first = chain.steps[0]
    aliases = results[first.result].variants["donated"].aliases
    assert [(a.input, a.output) for a in aliases] == [("x", "out.u")]
    assert first.output_bytes - first.argument_bytes == 512 * 512 * 4 + 16  # v, plus the tuple of two pointers


@pytest.fixture
def examples_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.mark.compile
def test_step_figures_are_xla_verbatim(chain_report: Report, examples_on_path: None) -> None:
    import forward as module

    chain = _chain(chain_report, "forward:chain")
    results = _results(chain_report)
    value: Any = module.example_x()
    for step, fn in zip(chain.steps, (module.create_field, module.update1, module.update2)):
        args = value if isinstance(value, tuple) else (value,)
        compiled = {
            "plain": compile_quietly(jax.jit(fn), *args),
            "donated": compile_quietly(jax.jit(fn, donate_argnums=tuple(range(len(args)))), *args),
        }
        for variant, executable in compiled.items():
            memory = results[step.result].variants[variant].memory
            for name, expected in xla_memory(executable).items():
                assert getattr(memory, name) == expected, (step.function, variant, name)
            assert step.footprint[variant] == memory.footprint_bytes
        value = jax.eval_shape(fn, *args)
    # the fused chain is forward() itself
    fused = results[chain.fused].variants["donated"].memory
    expected = xla_memory(
        compile_quietly(jax.jit(module.forward.__wrapped__, donate_argnums=(0,)), *module.example_x())
    )
    assert fused.temp_bytes == expected["temp_bytes"] and fused.alias_bytes == expected["alias_bytes"]


@pytest.mark.compile
def test_costs_are_the_worst_step_and_the_fused_compile(chain_report: Report) -> None:
    chain = _chain(chain_report, "forward:chain")
    results = _results(chain_report)
    steps, fused = chain.costs
    assert steps.layout == "steps" and fused.layout == "fused"
    donated = [s.footprint["donated"] for s in chain.steps]
    assert steps.donated_footprint == max(donated)
    assert steps.plain_footprint == max(s.footprint["plain"] for s in chain.steps)
    assert steps.worst_step == donated.index(max(donated))
    assert fused.donated_footprint == results[chain.fused].variants["donated"].memory.footprint_bytes
    assert fused.plain_live_peak == results[chain.fused].variants["plain"].memory.live_peak_bytes
    difference = fused.donated_footprint - steps.donated_footprint
    assert chain.cost_summary is not None
    word = "more" if difference > 0 else "saves" if difference < 0 else "the same"
    assert word in chain.cost_summary
    # the growth per step is the change in donated footprint
    assert chain.steps[0].grows_by is None
    for before, after in zip(chain.steps, chain.steps[1:]):
        assert after.grows_by == after.footprint["donated"] - before.footprint["donated"]


@pytest.mark.compile
def test_dtype_change_breaks_the_chain_at_that_step_leaf_and_line(chain_report: Report) -> None:
    chain = _chain(chain_report, "precision:chain")
    assert [s.status for s in chain.steps] == ["in-place", "breaks", "in-place"]
    assert not chain.in_place
    line = _line_of(PRECISION, "state.u.astype(jnp.bfloat16)")
    brk = chain.first_break
    assert brk is not None
    assert (brk.step, brk.function, brk.leaf) == (1, "to_storage", "state.u")
    assert brk.source is not None and brk.source.endswith(f"precision_chain.py:{line}")
    assert "float32 -> bfloat16" in brk.reason
    handoffs = chain.steps[1].handoffs
    assert [(h.code, h.leaf, h.output, h.before, h.after, h.breaks) for h in handoffs] == [
        ("dtype-change", "state.u", "out.u", "float32", "bfloat16", True)
    ]
    assert chain.steps[1].kept_alive == ("state.u",)
    assert chain.summary.startswith("breaks in place at step 2 of 3 (to_storage)")
    # no expectation was registered: reported, not failed
    assert chain.checks == () and chain_report.exit_code == 0


@pytest.mark.compile
def test_report_round_trips_with_chains(chain_report: Report) -> None:
    again = Report.from_dict(json.loads(json.dumps(chain_report.to_dict())))
    assert again.chains == chain_report.chains
    assert again == chain_report


@pytest.mark.compile
@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "github", "json"])
def test_every_format_shows_the_chain(chain_report: Report, fmt: str) -> None:
    text = get_renderer(fmt).render(chain_report, RenderOptions(width=120, min_bytes=1024))
    if fmt == "json":
        data = json.loads(text)
        assert [c["name"] for c in data["chains"]] == ["forward:chain", "precision:chain"]
        assert data["chains"][1]["first_break"]["leaf"] == "state.u"
        return
    assert "precision:chain" in text
    if fmt == "github":
        line = _line_of(PRECISION, "state.u.astype(jnp.bfloat16)")
        assert f"line={line},title=fieldmem%3A chain precision%3Achain breaks in place at step 2" in text
        return
    assert "to_storage" in text and "fused" in text
    assert "breaks in place at step 2 of 3" in text


# ---------------------------------------------------------------------------
# The command line


@pytest.mark.compile
def test_cli_chain_syntax_and_expect_in_place_fails_the_broken_chain(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app,
        ["check", f"{PRECISION}:advance,to_storage,squash", "--expect", "in-place", "-f", "json", "-o", str(out)],
    )
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    (chain,) = data["chains"]
    assert chain["checks"][0]["name"] == "expect-in-place" and not chain["checks"][0]["passed"]
    # the registered chain's arguments were found from its steps
    assert [r["name"] for r in data["results"]] == [
        "precision:chain[1:advance]",
        "precision:chain[2:to_storage]",
        "precision:chain[3:squash]",
        "precision:chain[fused]",
    ]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("{file}:advance,,squash", "has an empty step"),
        ("{file}:advance,to_storag", "did you mean 'to_storage'"),
        ("{file}:advance,N", "step 'N' of chain"),
    ],
)
def test_bad_chain_specs_are_one_line_errors(spec: str, words: str) -> None:
    result = CliRunner().invoke(app, ["check", spec.format(file=PRECISION)])
    assert result.exit_code == 2
    assert words in result.output
    assert "Traceback" not in result.output


def test_chain_needs_two_callable_steps() -> None:
    with pytest.raises(OptionError, match="at least two steps"):
        fieldmem.chain(lambda x: x)
    with pytest.raises(OptionError, match="step 2 is a int"):
        fieldmem.chain(lambda x: x, 3)


# ---------------------------------------------------------------------------
# Chains built in the test


def _chain_target(tmp_path: Path, source: str, spec_tail: str) -> ChainTarget:
    module = tmp_path / "user_chain.py"
    module.write_text(source)
    (target,) = resolve_target(f"{module}:{spec_tail}", TargetOptions())
    assert isinstance(target, ChainTarget)
    return target


OPTIMIZER = """
import jax.numpy as jnp
import fieldmem

def sgd(params, momentum):
    momentum = 0.9 * momentum + params
    return params - 0.1 * momentum, momentum

def decay(params, momentum):
    return params * 0.99, momentum

def args():
    return (jnp.ones((256, 256)), jnp.zeros((256, 256)))

fieldmem.case(sgd, args=args)
"""


@pytest.mark.compile
def test_tuple_state_is_spread_and_the_first_steps_case_lends_its_arguments(tmp_path: Path) -> None:
    target = _chain_target(tmp_path, OPTIMIZER, "sgd,decay,sgd")
    report = check_targets([target], CheckOptions(min_bytes=1024))
    (chain,) = report.chains
    assert [s.status for s in chain.steps] == ["in-place"] * 3, chain.summary
    results = _results(report)
    second = results[chain.steps[1].result]
    assert [i.path for i in second.inputs] == ["params", "momentum"]
    assert [(a.input, a.output) for a in second.variants["donated"].aliases] == [
        ("params", "out[0]"),
        ("momentum", "out[1]"),
    ]
    # the later steps are compiled on abstract arguments: nothing allocated
    assert all(i.sharding is not None for i in second.inputs)


FAILING = """
import jax.numpy as jnp

def first(x):
    return x * 2

def second(x):
    raise ValueError("no such thing")

def third(x):
    return x

def args():
    return (jnp.ones((64, 64)),)
"""


@pytest.mark.compile
def test_a_failing_step_is_reported_and_the_rest_are_not_checked(tmp_path: Path) -> None:
    target = _chain_target(tmp_path, FAILING, "first,second,third")
    target = ChainTarget(
        first=__import__("dataclasses").replace(target.first, args_factory=lambda: (jnp.ones((64, 64)),)),
        steps=target.steps,
    )
    report = check_targets([target], CheckOptions(min_bytes=1024))
    (chain,) = report.chains
    assert [s.status for s in chain.steps] == ["in-place", "error", "not-checked"]
    assert chain.first_break is not None and chain.first_break.step == 1
    assert "no such thing" in chain.first_break.reason
    assert chain.summary.startswith("cannot be checked at step 2 of 3 (second)")
    # the fused chain fails the same way; the first step's result still stands
    results = _results(report)
    assert results[chain.steps[0].result].status == "ok"
    assert report.exit_code == 2


def test_spread_passes_a_tuple_as_arguments_unless_the_next_step_takes_one() -> None:
    def two(a, b):
        return a, b

    def one(state):
        return state

    def many(*xs):
        return xs

    from typing import NamedTuple

    class State(NamedTuple):
        a: int
        b: int

    assert spread((1, 2), two) == (1, 2)
    assert spread((1, 2), one) == ((1, 2),)
    assert spread((1, 2), many) == (1, 2)
    assert spread(State(1, 2), two) == (State(1, 2),)
    assert spread([1, 2], two) == ([1, 2],)
    assert spread((5,), one) == (5,)
    assert compose([lambda x: (x, x + 1), two, lambda a, b: a * b])(3) == 12


# ---------------------------------------------------------------------------
# The verdict logic on hand-built results (no compile)


def _step(
    name: str,
    inputs: tuple[InputInfo, ...],
    outputs: tuple[OutputInfo, ...],
    aliases: tuple[Alias, ...],
    findings: tuple[Finding, ...] = (),
) -> TargetResult:
    """A checked step of 4 KiB leaves whose donated compile has ``aliases``."""
    memory = make_memory(4 * KIB, 4 * KIB, 4 * KIB * len(aliases))
    return make_result(
        name,
        target="t",
        inputs=inputs,
        outputs=outputs,
        findings=findings,
        plain=make_variant("plain", make_memory(4 * KIB, 4 * KIB)),
        donated=make_variant("donated", memory, donated_arguments=("x",), aliases=aliases),
    )


def test_a_step_compiled_for_another_sharding_is_a_reshard_between_steps() -> None:
    alias = (Alias("x", 0, "out", 0, 4096),)
    first = _step("c[1:a]", (make_input("x"),), (make_output(sharding="P('x') over mesh(x=4)"),), alias)
    second_findings = (Finding("error", "new-buffer", "out is written to a new buffer", output="out", source="m.py:9"),)
    second = _step(
        "c[2:b]",
        (make_input("x", sharding="P() over mesh(x=4)"),),
        (make_output(sharding="P() over mesh(x=4)"),),
        (),
        second_findings,
    )
    chain = analyze_chain(
        target="t",
        name="c",
        outcomes=[StepOutcome("a", "m.py:1", first), StepOutcome("b", "m.py:8", second)],
        fused=None,
        expect="in-place",
        min_bytes=1024,
    )
    assert [s.status for s in chain.steps] == ["in-place", "breaks"]
    (handoff,) = chain.steps[1].handoffs
    assert (
        handoff.code == "reshard"
        and handoff.before == "P('x') over mesh(x=4)"
        and handoff.after == "P() over mesh(x=4)"
    )
    assert chain.first_break is not None and chain.first_break.leaf == "x"
    assert "jax moves it between the calls" in chain.first_break.reason
    assert not chain.checks[0].passed
    assert make_report((first, second), chains=(chain,)).exit_code == 1
    # no fused result, so only the steps' cost
    assert [c.layout for c in chain.costs] == ["steps"] and chain.cost_summary is None


def test_a_dtype_change_xla_still_aliases_does_not_break() -> None:
    alias = (Alias("x", 0, "out", 0, 4096),)
    step = _step("c[1:a]", (make_input("x"),), (make_output(dtype="int32"),), alias)
    chain = analyze_chain(
        target="t",
        name="c",
        outcomes=[StepOutcome("a", None, step), StepOutcome("a", None, step)],
        fused=None,
        expect="any",
        min_bytes=1024,
    )
    assert chain.in_place
    handoff = chain.steps[0].handoffs[0]
    assert handoff.code == "dtype-change" and not handoff.breaks
    assert "XLA still reuses its buffer" in handoff.message


@pytest.mark.compile
def test_check_chain_api_on_functions_in_hand(examples_on_path: None) -> None:
    import precision_chain as module

    report = fieldmem.check_chain(
        [module.advance, module.to_storage, module.squash], *module.example_state(), expect="in-place"
    )
    (chain,) = report.chains
    assert chain.name == "precision_chain:advance,to_storage,squash"
    assert chain.first_break is not None and chain.first_break.function == "to_storage"
    assert report.exit_code == 1
    from fieldmem.frontends.api import failure_message

    assert failure_message(report).startswith(f"chain {chain.name}: breaks in place at step 2 of 3")
    with pytest.raises(OptionError, match="at least two functions"):
        fieldmem.check_chain([module.advance], *module.example_state())


def test_the_footprint_curve_draws_each_step_in_eighths_of_the_largest() -> None:
    from fieldmem.model.chain import ChainStep
    from fieldmem.render.pieces import footprint_curve

    steps = tuple(
        ChainStep(
            index=n, function=f"s{n}", result=f"c[{n}]", status="in-place", summary="", footprint={"donated": value}
        )
        for n, value in enumerate((1, 4, 2, None))
    )
    assert footprint_curve(steps) == "▂█▄ "


# ---------------------------------------------------------------------------
# A chain that starts by creating its state


@pytest.mark.compile
def test_a_chain_that_creates_its_state_from_a_scalar_passes_expect_in_place(assets: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    spec = f"{assets / 'creating_chain.py'}:init,step"
    result = CliRunner().invoke(app, ["check", spec, "--expect", "in-place", "-f", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    (chain,) = json.loads(out.read_text())["chains"]
    assert [s["status"] for s in chain["steps"]] == ["grows", "in-place"], chain["summary"]
    assert chain["checks"][0]["passed"] and chain["first_break"] is None
    first = chain["steps"][0]
    assert first["summary"].startswith("creates the state") and first["handoffs"] == []


@pytest.mark.compile
def test_check_chain_create_then_step_in_place_while_a_breaking_step_still_breaks() -> None:
    def init(scale):
        z = jnp.full((64, 64), scale, dtype=jnp.float32)
        return z, z

    def step(u, v):
        return u.at[1:-1].add(1.0), v.at[0].set(0.0)

    def widen(u, v):
        return u.astype(jnp.float64 if jax.config.jax_enable_x64 else jnp.bfloat16), v

    report = fieldmem.check_chain([init, step], 1.0, expect="in-place", min_bytes=1024)
    (chain,) = report.chains
    assert [s.status for s in chain.steps] == ["grows", "in-place"], chain.summary
    assert chain.in_place and chain.checks[0].passed
    # the creating step's own verdict still names its new output and the copy (a fresh output is
    # a new output, not a break: issue 15; the copy of one output into the other still is)
    first = _results(report)[chain.steps[0].result]
    codes = {(f.code, f.severity) for f in first.verdict.findings}
    assert ("output-copy", "error") in codes and any(code == "new-output" for code, _ in codes), codes
    # a step that has state to hand on and does not is still a break
    broken = fieldmem.check_chain([init, step, widen], 1.0, expect="in-place", min_bytes=1024)
    assert [s.status for s in broken.chains[0].steps] == ["grows", "in-place", "breaks"]
    assert not broken.chains[0].checks[0].passed


# ---------------------------------------------------------------------------
# Steps that take extras besides the state (step_args)


def sgd_with_gradient(params, opt, g):
    opt = 0.9 * opt + g
    return params - 0.1 * opt, opt


@pytest.mark.compile
def test_a_step_taking_a_per_step_gradient_is_in_place_and_the_gradient_is_not_state() -> None:
    params, opt, g = jnp.ones((64, 64)), jnp.zeros((64, 64)), jnp.full((64, 64), 0.5)
    steps = [sgd_with_gradient, sgd_with_gradient]
    report = fieldmem.check_chain(
        steps, params, opt, step_args={"sgd_with_gradient": (g,)}, expect="in-place", min_bytes=1024
    )
    (chain,) = report.chains
    assert [s.status for s in chain.steps] == ["in-place", "in-place"], chain.summary
    assert chain.in_place and chain.checks[0].passed
    results = _results(report)
    for step in chain.steps:
        result = results[step.result]
        assert step.extras == ("g",) and step.kept_alive == () and step.handoffs == ()
        # the state is donated and reused, the gradient is an argument, never donated
        assert [(i.path, i.donated) for i in result.inputs] == [("params", True), ("opt", True), ("g", False)]
        assert sorted((a.input, a.output) for a in result.variants["donated"].aliases) == [
            ("opt", "out[1]"),
            ("params", "out[0]"),
        ]
    # the figures are those of the step jitted as the user runs it: state donated, gradient not
    second = results[chain.steps[1].result].variants["donated"].memory
    compiled = compile_quietly(jax.jit(sgd_with_gradient, donate_argnums=(0, 1)), params, opt, g)
    memory = xla_memory(compiled)
    assert (second.argument_bytes, second.alias_bytes) == (memory["argument_bytes"], memory["alias_bytes"])
    # the fused chain takes each step's gradient as an argument of its own, not a constant, not donated
    fused = results[chain.fused]
    assert fused.status == "ok"
    extras = [(i.path, i.donated) for i in fused.inputs if i.path.startswith("step_args")]
    assert extras == [
        ("step_args['1:sgd_with_gradient']['g']", False),
        ("step_args['2:sgd_with_gradient']['g']", False),
    ]
    assert not any(f.code == "constant" for f in fused.verdict.findings)


@pytest.mark.compile
def test_without_its_gradient_the_chain_cannot_call_the_step() -> None:
    report = fieldmem.check_chain([sgd_with_gradient, sgd_with_gradient], jnp.ones((64, 64)), jnp.zeros((64, 64)))
    assert report.chains[0].steps[0].status == "error"


@pytest.mark.compile
def test_a_registered_chain_brings_its_step_args_to_the_command_line(assets: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    spec = f"{assets / 'gradient_chain.py'}:step,step"
    result = CliRunner().invoke(app, ["check", spec, "--expect", "in-place", "-f", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    (chain,) = json.loads(out.read_text())["chains"]
    assert [s["status"] for s in chain["steps"]] == ["in-place", "in-place"]
    assert [s["extras"] for s in chain["steps"]] == [["g"], ["g"]]


def test_step_args_must_name_a_step_and_be_factories() -> None:
    def a(x):
        return x

    def b(x, g):
        return x + g

    with pytest.raises(OptionError, match="names no step"):
        fieldmem.chain(a, b, step_args={"c": lambda: (1.0,)})
    with pytest.raises(OptionError, match="must be a callable"):
        fieldmem.chain(a, b, step_args={2: (1.0,)})


@pytest.mark.compile
def test_the_fixture_chain_passes_step_args(fieldmem_check: Any) -> None:
    g = jnp.full((64, 64), 0.5)
    report = fieldmem_check.chain(
        [sgd_with_gradient, sgd_with_gradient],
        jnp.ones((64, 64)),
        jnp.zeros((64, 64)),
        step_args={2: lambda: (g,), 1: (g,)},
    )
    assert report.chains[0].in_place


def test_spread_counts_the_extras_after_the_state() -> None:
    def state_and_batch(state, batch):
        return state

    def two_and_batch(a, b, batch):
        return a, b

    assert spread((1, 2), state_and_batch, extras=1) == ((1, 2),)
    assert spread((1, 2), two_and_batch, extras=1) == (1, 2)
    assert spread((1, 2), state_and_batch) == (1, 2)  # no extras: two positional, the tuple is spread


def test_a_fused_chain_within_min_bytes_of_its_steps_costs_the_same() -> None:
    """ "fusing costs 4 B more" was said of a difference below --min-bytes (issue 48): it is the same."""
    from fieldmem.findings.chains import _cost_summary
    from fieldmem.model.chain import ChainCost

    def costs(separate: int, fused: int) -> tuple[ChainCost, ...]:
        return (
            ChainCost("steps", plain_footprint=separate, donated_footprint=separate),
            ChainCost("fused", plain_footprint=fused, donated_footprint=fused),
        )

    assert _cost_summary(costs(1000, 1004), (), 1024).endswith("the same either way (within 1.0 KiB)")
    assert _cost_summary(costs(1000, 1000), (), 1024).endswith("the same either way")
    assert _cost_summary(costs(1000, 3000), (), 1024).endswith("fusing costs 2.0 KiB more")
