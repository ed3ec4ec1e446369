"""The verdict corpus: user-style functions, each with the verdict and the ``--expect`` outcome it must get,
held to facts jax gives independently of fieldmem's analysis.

Each case names its verdict (``in-place``, ``not-in-place``, ``nothing-to-update``). Before fieldmem's verdict
is compared with it, the case's own claim is checked against jax: the function is jitted with the same
donation and run on real arrays, and the donated inputs' buffer pointers, the outputs' pointers,
``is_deleted()`` and ``memory_analysis()`` must agree with the claim (:func:`_truth_agrees`). Then fieldmem
must give that verdict, the ``expect-in-place`` check must pass exactly for ``in-place`` (the run exits 1
otherwise), ``--expect any`` must fail nothing, and the headline must name the finding with the most bytes at
stake. All cases compile in one pipelined check.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax
import pytest
from verdict_cases import CASES, MIN, Case
from verdict_cases import leaves as _leaves

from fieldmem.findings.verdict import RULES, expectation_met, rank
from fieldmem.model.target import TargetResult
from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions

from helpers_compile import UNUSABLE_WARNING, make_target

pytestmark = pytest.mark.compile


@dataclass(frozen=True)
class Truth:
    """What jax says of a case, fieldmem aside."""

    donated: list[int]  # bytes of each donated leaf
    reused: list[bool]  # per donated leaf: an output took its buffer (same pointer, input deleted)
    # per output leaf not in a donated buffer: its bytes, and whether an input leaf has its shape and dtype
    fresh: list[tuple[int, bool]]
    temp: int  # memory_analysis().temp_size_in_bytes of the donated compile
    # per donated leaf: still alive after the call (jax deletes a donated buffer only when it lends it;
    # one it cannot use stays, and jax warns about it when it compiles the program)
    alive: list[bool]


def _truth(case: Case) -> Truth:
    args = case.args()
    if case.jitted is not None:
        jitted, donate = case.jitted, case.jit_donates
    else:
        positions = case.donate
        if positions is None:  # fieldmem's default: every argument that holds arrays
            positions = tuple(i for i, a in enumerate(args) if _leaves(a))
        donate = positions
        jitted = jax.jit(case.fn, donate_argnums=donate, static_argnums=case.static)
    inputs = _leaves(args)
    donated_leaves = [leaf for i in donate for leaf in _leaves(args[i])]
    pointers = [leaf.unsafe_buffer_pointer() for leaf in donated_leaves]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        temp = int(jitted.lower(*args).compile().memory_analysis().temp_size_in_bytes)
        out = jitted(*args)
    outputs = _leaves(out)
    out_pointers = {leaf.unsafe_buffer_pointer() for leaf in outputs}
    reused = [p in out_pointers and leaf.is_deleted() for p, leaf in zip(pointers, donated_leaves)]
    taken = {p for p, r in zip(pointers, reused) if r}
    shapes = {(leaf.shape, leaf.dtype) for leaf in inputs}
    fresh = [
        (leaf.nbytes, (leaf.shape, leaf.dtype) in shapes)
        for leaf in outputs
        if leaf.unsafe_buffer_pointer() not in taken
    ]
    alive = [not leaf.is_deleted() for leaf in donated_leaves]
    return Truth([leaf.nbytes for leaf in donated_leaves], reused, fresh, temp, alive)


def _truth_agrees(case: Case, truth: Truth) -> str | None:
    """Why jax's facts contradict a case's claimed verdict, or None when they agree.

    Not in place is any of: (a) a donated leaf of at least the threshold that nothing reuses (jax keeps it alive),
    unless fieldmem's default donated it; (b) a temporary as large as a reused state leaf (a copy of state
    through it); (c) an output of at least the threshold outside every donated buffer with an input's shape
    and dtype (the state duplicated, or not donated). Nothing to update in place: nothing is reused, and every
    output is smaller than every donated leaf. In place as written: every donated buffer is reused and no state
    is duplicated, but a temporary as large as a reused state leaf holds the copy the compiler keeps (whose
    choice it is, the HLO says: tests/xla/test_hlo.py).
    """
    large = [(size, reused) for size, reused in zip(truth.donated, truth.reused) if size >= MIN]
    kept = [size for size, alive in zip(truth.donated, truth.alive) if size >= MIN and alive]
    reused_sizes = [size for size, reused in large if reused]
    unusable = [size for size, reused in large if not reused] if case.donate is not None or case.jitted else []
    copied = bool(reused_sizes) and truth.temp >= min(reused_sizes)
    duplicated = any(size >= MIN and same for size, same in truth.fresh)
    if case.kind == "in-place":
        if not reused_sizes:
            return "no donated buffer is reused"
        if unusable or (kept and case.donate is not None):
            return "a donated buffer is not usable"
        if copied:
            return f"a temporary of {truth.temp} B, as large as a reused state leaf, suggests a copy of state"
        if duplicated:
            return "an output outside the donated buffers has an input's shape and dtype"
        return None
    if case.kind == "in-place-as-written":
        if not reused_sizes:
            return "no donated buffer is reused"
        if unusable or (kept and case.donate is not None):
            return "a donated buffer is not usable"
        if duplicated:
            return "an output outside the donated buffers has an input's shape and dtype"
        if not copied:
            return "no temporary could hold the copy the compiler keeps"
        return None
    if case.kind == "nothing-to-update":
        if any(truth.reused):
            return "a donated buffer is reused"
        if len(kept) != len(large):
            return "jax deleted a donated buffer: it lent it"
        smallest = min((size for size, _ in large), default=None)
        if smallest is not None and any(size >= smallest for size, _ in truth.fresh if size >= MIN):
            return "an output is large enough to hold a donated buffer"
        return None
    if unusable or copied or duplicated or not reused_sizes:
        return None
    return "every donated buffer is reused, no temporary could hold a copy of state, and no state is duplicated"


@pytest.fixture(scope="module")
def checked() -> dict[str, TargetResult]:
    targets = [
        make_target(
            case.jitted if case.jitted is not None else case.fn,
            (lambda case=case: case.args()),
            donate=list(case.donate) if case.donate is not None else None,
            static=list(case.static) or None,
            name=f"corpus:{case.name}",
            expect="in-place",
        )
        for case in CASES
    ]
    report = check_targets(targets, CheckOptions(min_bytes=MIN, isolate=False))
    return {r.name.removeprefix("corpus:"): r for r in report.results}


def test_the_corpus_is_large_enough_and_covers_every_verdict() -> None:
    assert len(CASES) >= 30
    # "does not fit" needs a device's memory, which the CPU this corpus runs on has none of: the
    # deviceless kinds hold it to XLA's and libtpu's own limits (tests/findings/test_capacity.py)
    assert {c.kind for c in CASES} == {r.kind for r in RULES} - {"does-not-fit"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_gets_its_verdict_and_exit(case: Case, checked: dict[str, TargetResult]) -> None:
    why = _truth_agrees(case, _truth(case))
    assert why is None, f"the case's claim {case.kind!r} is not what jax does: {why}"
    result = checked[case.name]
    assert result.status == "ok", result.error
    verdict = result.verdict
    assert verdict is not None
    assert verdict.kind == case.kind, verdict.summary
    as_written = case.kind in ("in-place", "in-place-as-written")
    assert verdict.in_place == as_written
    # --expect in-place: the check passes exactly for in place, as written or not (exit 0), else it fails (exit 1)
    (check,) = [c for c in result.checks if c.name == "expect-in-place"]
    assert check.passed == as_written == expectation_met(verdict.kind, "in-place"), check.message
    # --expect any fails nothing
    assert expectation_met(verdict.kind, "any")
    assert verdict.findings == rank(verdict.findings)
    errors = [f for f in verdict.findings if f.severity == "error"]
    if case.kind == "not-in-place":
        largest = max(errors, key=lambda f: f.bytes or 0)
        assert verdict.summary.startswith("not in place: " + largest.message), verdict.summary
        assert check.message.startswith("expected in place with donation, but it is not: ")
    else:
        assert not errors
    if case.kind == "in-place-as-written":
        chosen = [f for f in verdict.findings if f.code == "compiler-copy"]
        assert chosen, verdict.findings
        largest = max(chosen, key=lambda f: f.bytes or 0)
        assert verdict.summary.startswith("in place as written; " + largest.message), verdict.summary
        assert "XLA:CPU" in largest.message and "--backend tpu:v5e" in largest.message, largest.message
    if case.kind == "nothing-to-update":
        assert verdict.summary.startswith("nothing to update in place")
        assert "nothing to update in place" in check.message
