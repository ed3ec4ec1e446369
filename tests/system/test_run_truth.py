"""``--run`` held to runtime truth on real readings: an alias is confirmed only on the same buffer
address *and* the donated input deleted; unplanned aliases and donated inputs left alive are produced,
not only asserted absent.

The readings here come from real calls of real compiles through the driver
(``run_variant``). Two jax behaviours make the cases without any fake:

- an input with a host view (``np.asarray`` of a CPU array holds an external
  reference to its buffer) cannot be donated: the runtime leaves it alive and
  writes the output elsewhere, although the plan aliases them;
- a donated input no output can reuse (no output of its size, or never read)
  is not aliased in the plan, and jax does not delete it.

An unplanned alias is an output found in an input's buffer that the plan of
the program does not alias: the donated executable's real reading held
against the plain plan is exactly that (the program run is not the program
analysed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import fieldmem.driver as driver
from fieldmem.driver import execute
from fieldmem.findings.probecheck import WHOLE_BUFFER_PASSES
from fieldmem.findings.runcheck import apply_run, run_check
from fieldmem.model.readings import RunReading
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.checker import check_targets
from fieldmem.render import RenderOptions
from fieldmem.render.table import render
from fieldmem.request.options import CheckOptions

from helpers_compile import make_target

pytestmark = pytest.mark.compile

RUN = CheckOptions(min_bytes=1024, run=True, isolate=False)


def set_row(u, idx, row):
    return u.at[idx].set(row)


def set_row_args() -> tuple[Any, ...]:
    return jnp.zeros((64, 64), jnp.float32), jnp.int32(3), jnp.ones((64,), jnp.float32)


def _checked(fn: Any, factory: Any, donate: str, monkeypatch: pytest.MonkeyPatch) -> tuple[TargetResult, dict]:
    """The checked ``--run`` result and the driver's real readings, by variant."""
    report, readings = _checked_report(fn, factory, donate, monkeypatch)
    return report.results[0], readings


def _checked_report(fn: Any, factory: Any, donate: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Report, dict]:
    readings: dict[str, RunReading] = {}
    real = driver.run_variant

    def keep(call: Any, compiled: Any) -> RunReading:
        reading = real(call, compiled)
        readings[reading.variant] = reading
        return reading

    monkeypatch.setattr(driver, "run_variant", keep)
    report = check_targets([make_target(fn, factory, donate=donate)], RUN)
    (result,) = report.results
    assert result.status == "ok", result.error
    return report, readings


def test_a_planned_alias_is_confirmed_with_the_same_address_and_the_input_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, readings = _checked(set_row, set_row_args, "u", monkeypatch)
    (alias,) = result.variants["donated"].aliases
    reading = readings["donated"]
    # the truth, read from the reading itself: same address, input deleted
    assert reading.input_pointers[alias.input_index] == reading.output_pointers[alias.output_index]
    assert reading.deleted[alias.input_index] is True
    (check,) = result.variants["donated"].run.aliases
    assert check.confirmed and check.detail.endswith("u was consumed (deleted)")
    assert result.variants["donated"].run.kept == ()


def test_the_same_address_without_the_input_deleted_is_not_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real donated reading (same address, input deleted) with only the deletion state of the
    real plain reading (not deleted): pointer identity alone does not confirm."""
    result, readings = _checked(set_row, set_row_args, "u", monkeypatch)
    donated, plain = readings["donated"], readings["plain"]
    assert plain.deleted[0] is False  # the plain run's u, really alive after the call
    alive = dataclasses.replace(donated, deleted=plain.deleted)
    (check,) = run_check(result, result.variants["donated"], alive).aliases
    assert check.comparable and not check.confirmed
    assert "u was not deleted: the runtime did not consume the donation" in check.detail
    revised = apply_run(result, {"donated": alive})
    assert not revised.verdict.in_place
    assert [f.code for f in revised.verdict.findings if f.severity == "error"] == ["run-alias-missing"]
    assert revised.variants["donated"].run.kept == ("u",)


def test_an_input_the_runtime_cannot_consume_is_left_alive_and_its_alias_not_confirmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host view of the fresh argument (an external reference) stops the runtime from taking the
    donated buffer: the plan aliases u, the real run leaves u alive and writes out elsewhere."""
    real_fresh = execute.fresh_arguments
    views: list[Any] = []

    def with_views(call: Any, *rest: Any) -> Any:
        args, kwargs, leaves = real_fresh(call, *rest)
        views.extend(np.asarray(leaf) for leaf in leaves)  # held until the test ends
        return args, kwargs, leaves

    monkeypatch.setattr(execute, "fresh_arguments", with_views)
    report, readings = _checked_report(set_row, set_row_args, "u", monkeypatch)
    (result,) = report.results
    assert result.variants["donated"].aliases  # the plan aliases u -> out
    reading = readings["donated"]
    assert reading.deleted[0] is False and reading.input_pointers[0] != reading.output_pointers[0]
    run = result.variants["donated"].run
    (check,) = run.aliases
    assert not check.confirmed and "u was not deleted" in check.detail
    assert run.kept == ("u",) and run.deleted == ()
    assert not result.verdict.in_place
    assert result.verdict.summary.startswith("not in place at run time: at run time the donated plan's alias u -> out")
    assert "donated but not consumed: u" in render(report, RenderOptions(verbose=True))


def two_states(x, y):
    return x + y


def to_half_pairs(x):
    return jnp.concatenate([x, x]).astype(jnp.bfloat16)  # x's bytes, not its element count


def mismatched(x):
    return x[:32] * 2.0


def never_reads(x, y):
    return y * 2.0


@pytest.mark.parametrize(
    ("fn", "factory", "donate", "alive", "code"),
    [
        (two_states, lambda: (jnp.zeros(1024), jnp.zeros(1024)), "x,y", "y", "outputs-taken"),
        (to_half_pairs, lambda: (jnp.zeros(1024),), "x", "x", "not-reused"),
        (mismatched, lambda: (jnp.zeros(1024),), "x", "x", "no-output-of-size"),
        (never_reads, lambda: (jnp.zeros(1024), jnp.zeros(1024)), "x", "x", "unused"),
    ],
)
def test_a_donated_input_no_output_reuses_is_left_alive(
    fn: Any, factory: Any, donate: str, alive: str, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, readings = _checked(fn, factory, donate, monkeypatch)
    index = next(leaf.index for leaf in result.inputs if leaf.path == alive)
    assert readings["donated"].deleted[index] is False  # jax's own word: the buffer is alive
    (unusable,) = result.variants["donated"].unusable_donations
    assert (unusable.input, unusable.code) == (alive, code)
    assert result.variants["donated"].run.kept == (alive,)


def test_an_output_in_an_input_buffer_the_plan_does_not_alias_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The donated executable's real run read against the plain plan: out came back in u's buffer,
    which that plan does not alias."""
    result, readings = _checked(set_row, set_row_args, "u", monkeypatch)
    donated = readings["donated"]
    assert donated.input_pointers[0] == donated.output_pointers[0]
    assert result.variants["plain"].aliases == ()
    revised = apply_run(result, {"plain": donated})
    run = revised.variants["plain"].run
    (unplanned,) = run.unplanned
    assert (unplanned.input, unplanned.output) == ("u", "out")
    assert unplanned.detail == "out came back in u's buffer, which the compiled plan does not alias"
    (finding,) = [f for f in revised.verdict.findings if f.code == "run-unplanned-alias"]
    assert finding.message == "plain run: out came back in u's buffer, which the compiled plan does not alias"
    # the plain run's own reading holds no such thing
    assert result.variants["plain"].run.unplanned == ()


# ---- --probe on real updates: the positive path, and words that say what was timed ----------------

MIB16 = (2048, 2048)  # float32: 16 MiB, above the probe's 1 MiB floor and past the caches at both sizes


def scaled_row(u, idx, row):
    # aliased and updated by a slice, but every element is rewritten first: one memory-bound pass, the
    # rewrite at its cheapest. Its time grows less than in proportion at these sizes (caches), which
    # the probe's growth alone misjudged; measured in in-place passes over the added bytes it reads
    # 1.0 to 2.4 here (four runs), against the 0.3 that makes whole-buffer
    return (u * 1.1).at[idx].set(row)


def test_the_probe_finds_a_call_whose_time_grows_with_the_buffer_and_says_the_whole_call_was_timed() -> None:
    """Aliased, the output made by a slice update, yet the call rewrites all of u (the scaling): the
    probe's positive path on a real program, worded as what was timed (the call), not the update."""
    target = make_target(scaled_row, lambda: (jnp.ones(MIB16), jnp.int32(3), jnp.ones(2048)), donate="u")
    # timing on a shared 2-core machine: XLA:CPU splits a large elementwise op over the cores, and other
    # processes take them, so one probe can read less than in proportion; three tries, one must find it
    seen = []
    for _ in range(3):
        report = check_targets([target], CheckOptions(min_bytes=1024, run=True, probe=True, isolate=False))
        (result,) = report.results
        assert [(a.input, a.output) for a in result.variants["donated"].aliases] == [("u", "out")]
        (probe,) = result.probes
        seen.append(probe.message)
        if probe.code == "whole-buffer":
            break
    assert probe.code == "whole-buffer", seen
    assert probe.passes is not None and probe.passes >= WHOLE_BUFFER_PASSES
    (finding,) = [f for f in result.verdict.findings if f.code == "probe-whole-buffer"]
    assert "the whole call was timed" in finding.message
    assert finding.message.startswith("out is aliased to u and updated by a dynamic-update-slice")


def test_the_probe_of_an_undonated_update_is_whole_buffer_and_does_not_claim_an_alias() -> None:
    """The plain variant copies u before writing the row: its call time grows with u."""
    from fieldmem.driver import prepare_call, probe_update, start_variants
    from fieldmem.findings.probecheck import probe_outcome
    from fieldmem.request.spec import DonateSpec, StaticSpec

    call = prepare_call(
        set_row, (jnp.zeros(MIB16), jnp.int32(3), jnp.ones(2048)), {}, donate=DonateSpec.parse("u"), static=StaticSpec()
    )
    plain, donated = start_variants(call, None).result()
    outcome = probe_outcome("u", "out", "dynamic-update-slice", probe_update(call, plain, 0, 0), aliased=False)
    assert outcome.code == "whole-buffer", outcome.message
    assert outcome.message.startswith("out is not aliased to u in this program")
    assert "aliased to u and" not in outcome.message
    # the donated variant of the same update: what its call adds is a tenth of a pass or less
    aliased = probe_outcome("u", "out", "dynamic-update-slice", probe_update(call, donated, 0, 0))
    assert aliased.code == "slice-only" and aliased.passes is not None, aliased.message
    assert outcome.passes is not None and outcome.passes >= WHOLE_BUFFER_PASSES
