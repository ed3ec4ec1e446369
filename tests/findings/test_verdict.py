"""The verdict is about state: new outputs are reported but do not break in place.

A decode step writes its KV cache in place and returns fresh logits: the
logits are a *new output* (no donated input has their size), counted in the
figures and named in the findings, but the step is in place. An output the
user declares new (``--new``, ``new=``) is never a break. An in-place summary
says in one sentence why donation saves nothing, or why temporaries grow.
Real compiles of tiny functions, checked against runtime truth (buffer
pointers, ``is_deleted()``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

import fieldmem
from fieldmem.findings.pairing import declared_new
from fieldmem.frontends.cli import app
from fieldmem.model.errors import OptionError
from fieldmem.model.units import format_bytes
from fieldmem.request.options import parse_new

from helpers_compile import check_one, compile_quietly, make_target, run_and_check_aliases, xla_memory

runner = CliRunner()

LOGITS = 4096  # float32: 16 KiB, over the default --min-bytes of 1 KiB


def decode(cache, pos, x):
    kv = jnp.tanh(x)
    logits = jnp.tile(x, LOGITS // x.shape[0]) * 2.0 + pos
    return cache.at[:, pos].set(kv), logits


def decode_args() -> tuple[Any, ...]:
    return jnp.zeros((2, 16, 64), jnp.float32), jnp.int32(3), jnp.ones((64,), jnp.float32)


# ---- a decode step: the cache in place, the logits new -------------------------------


@pytest.mark.compile
def test_decode_step_with_fresh_logits_is_in_place() -> None:
    result = check_one(make_target(decode, decode_args, donate="cache", expect="in-place"))
    assert result.verdict.in_place, result.verdict.summary
    assert [c.passed for c in result.checks] == [True]
    assert [(a.input, a.output) for a in result.variants["donated"].aliases] == [("cache", "out[0]")]
    [new] = [f for f in result.verdict.findings if f.code == "new-output"]
    assert new.severity == "info" and new.output == "out[1]"
    assert new.message.startswith("out[1] (float32[4096], 16.0 KiB) is a new output")
    assert "no donated input has its size" in new.message
    assert "1 new output(s)" in result.verdict.summary
    # counted in the figures: the donated variant's outputs still hold the logits
    assert result.variants["donated"].memory.output_bytes >= LOGITS * 4
    # runtime truth: the cache is reused, the logits are a buffer of their own
    compiled = compile_quietly(jax.jit(decode, donate_argnums=0), *decode_args())
    args = decode_args()
    out = run_and_check_aliases(compiled, result, args, {}, ["cache", "pos", "x"])
    assert args[0].is_deleted() and not args[2].is_deleted()
    assert out[1].unsafe_buffer_pointer() not in {args[2].unsafe_buffer_pointer()}


DECODE_MODULE = """
import jax.numpy as jnp

import fieldmem


def decode(cache, pos, x):
    kv = jnp.tanh(x)
    logits = jnp.tile(x, 4096 // x.shape[0]) * 2.0 + pos
    return cache.at[:, pos].set(kv), logits


def make_args():
    return jnp.zeros((2, 16, 64), jnp.float32), jnp.int32(3), jnp.ones((64,), jnp.float32)


def keep(state, extra):
    # extra's update is meant as a fresh buffer, but extra has its shape: not donated, it is flagged
    return state.at[0].set(1.0), extra * 2.0


def keep_args():
    return jnp.zeros((64, 64), jnp.float32), jnp.ones((64, 64), jnp.float32)


fieldmem.case(decode, args=make_args, donate="cache")
fieldmem.case(keep, args=keep_args, donate="state")
"""


def _module(tmp_path: Path) -> Path:
    path = tmp_path / "decoder.py"
    path.write_text(textwrap.dedent(DECODE_MODULE))
    return path


def _check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120"})


@pytest.mark.compile
def test_cli_decode_step_exits_0_under_expect_in_place(tmp_path: Path) -> None:
    module = _module(tmp_path)
    result = _check(f"{module}:decode", "--expect", "in-place", "--format", "json")
    assert result.exit_code == 0, result.output
    [target] = json.loads(result.stdout)["results"]
    assert target["verdict"]["in_place"]
    codes = {f["code"]: f for f in target["verdict"]["findings"]}
    assert "new-buffer" not in codes and codes["new-output"]["output"] == "out[1]"
    table = _check(f"{module}:decode", "--expect", "in-place", "-v")
    assert table.exit_code == 0, table.output
    assert "out[1] (float32[4096], 16.0 KiB) is a new output" in " ".join(table.stdout.split())


@pytest.mark.compile
def test_cli_new_declares_a_state_sized_output_new(tmp_path: Path) -> None:
    module = _module(tmp_path)
    flagged = _check(f"{module}:keep", "--expect", "in-place", "--format", "json")
    assert flagged.exit_code == 1, flagged.output
    [target] = json.loads(flagged.stdout)["results"]
    [error] = [f for f in target["verdict"]["findings"] if f["severity"] == "error"]
    assert error["code"] == "new-buffer" and error["output"] == "out[1]" and "donate extra" in error["message"]

    declared = _check(f"{module}:keep", "--expect", "in-place", "--new", "out[1]", "--format", "json")
    assert declared.exit_code == 0, declared.output
    [target] = json.loads(declared.stdout)["results"]
    [new] = [f for f in target["verdict"]["findings"] if f["code"] == "new-output"]
    assert new["output"] == "out[1]" and "declared new" in new["message"]
    # a pattern that names no output is said so, and changes nothing else
    stray = _check(f"{module}:keep", "--new", "out[1],out.logits", "--expect", "in-place", "--format", "json")
    assert stray.exit_code == 0, stray.output
    [target] = json.loads(stray.stdout)["results"]
    [warning] = [f for f in target["verdict"]["findings"] if f["code"] == "new-unmatched"]
    assert "'out.logits' names no output" in warning["message"]


def test_cli_rejects_a_new_that_is_no_output_path(tmp_path: Path) -> None:
    result = _check(f"{_module(tmp_path)}:keep", "--new", "logits")
    assert result.exit_code == 2
    assert "--new 'logits' is not an output path" in result.stderr


def keep(state, extra):
    return state.at[0].set(1.0), extra * 2.0


def keep_args() -> tuple[Any, ...]:
    return jnp.zeros((64, 64), jnp.float32), jnp.ones((64, 64), jnp.float32)


@pytest.mark.compile
def test_api_new_declares_a_state_sized_output_new() -> None:
    report = fieldmem.check_function(keep, *keep_args(), donate="state", expect="in-place")
    assert report.exit_code == 1
    with pytest.raises(fieldmem.NotInPlaceError):
        fieldmem.assert_in_place(keep, *keep_args(), donate="state")
    report = fieldmem.check_function(keep, *keep_args(), donate="state", expect="in-place", new="out[1]")
    assert report.exit_code == 0, report.results[0].verdict.summary
    fieldmem.assert_in_place(keep, *keep_args(), donate="state", new=["out[1]"])
    with pytest.raises(OptionError, match="new='extra' is not an output path"):
        fieldmem.check_function(keep, *keep_args(), donate="state", new="extra")


@pytest.mark.compile
def test_outputs_whose_donors_are_all_reused_are_new() -> None:
    """Two outputs of one donated input's size: one reuses it, the other is new (no state is left unreused)."""

    def twice(x):
        y = x + 1.0
        return y, y * 2.0

    result = check_one(make_target(twice, lambda: (jnp.zeros((64, 64), jnp.float32),), expect="in-place"))
    assert not [f for f in result.verdict.findings if f.code == "new-buffer"]
    # whatever else XLA does (it may copy x to keep it while both outputs read it), the second output is not a break
    assert result.verdict.in_place == (not [f for f in result.verdict.findings if f.severity == "error"])
    [alias] = result.variants["donated"].aliases
    [new] = [f for f in result.verdict.findings if f.code == "new-output"]
    assert new.output != alias.output and "already reused by another output" in new.message
    compiled = compile_quietly(jax.jit(twice, donate_argnums=0), jnp.zeros((64, 64), jnp.float32))
    run_and_check_aliases(compiled, result, (jnp.zeros((64, 64), jnp.float32),), {}, ["x"])


@pytest.mark.compile
def test_a_free_donated_input_of_its_size_still_breaks_in_place() -> None:
    """The rule is not "any output may be new": a not-donated input of the output's shape is state."""
    result = check_one(make_target(keep, keep_args, donate="state", expect="in-place"))
    assert not result.verdict.in_place
    assert [f.output for f in result.verdict.findings if f.code == "new-buffer"] == ["out[1]"]


# ---- the summary says why donation saves nothing -----------------------------------------


def reduce_rows(x):
    return jnp.sum(x, axis=0)


@pytest.mark.compile
def test_a_reduction_of_a_donated_input_has_nothing_to_update_in_place() -> None:
    """No output can hold the donated rows: not "in place" (nothing is reused), and --expect in-place fails
    with the fix, while the figures say donation saves nothing."""
    result = check_one(make_target(reduce_rows, lambda: (jnp.ones((64, 64), jnp.float32),), expect="in-place"))
    assert result.verdict.kind == "nothing-to-update" and not result.verdict.in_place
    assert result.savings["footprint_bytes"] is not None and result.savings["footprint_bytes"] <= 0
    assert not result.variants["donated"].aliases
    assert result.verdict.summary == (
        "nothing to update in place: no output can reuse a donated buffer; x (16.0 KiB) is donated but "
        "no output has its size (16.0 KiB): don't donate it"
    )
    (check,) = result.failed_checks
    assert check.message.endswith("don't donate x, or expect any")


def laplacian(u):
    return jnp.roll(u, 1, axis=0) + jnp.roll(u, -1, axis=0) + jnp.roll(u, 1, axis=1) + jnp.roll(u, -1, axis=1) - 4.0 * u


def laplacian_step(field):
    return dict(u=field["u"], v=field["v"] + 0.1 * laplacian(field["u"]))


def field_args() -> tuple[Any, ...]:
    return (dict(u=jnp.ones((128, 128), jnp.float32), v=jnp.ones((128, 128), jnp.float32)),)


@pytest.mark.compile
def test_in_place_summary_says_when_temporaries_grow_with_donation() -> None:
    """v's update reads u around every point: with v's buffer reused, XLA keeps more in temporaries."""
    result = check_one(make_target(laplacian_step, field_args))
    assert result.verdict.in_place, result.verdict.summary
    plain, donated = result.variants["plain"].memory, result.variants["donated"].memory
    # the figures are XLA's own, from compiles made here
    assert plain.temp_bytes == xla_memory(compile_quietly(jax.jit(laplacian_step), *field_args()))["temp_bytes"]
    donated_compile = compile_quietly(jax.jit(laplacian_step, donate_argnums=0), *field_args())
    assert donated.temp_bytes == xla_memory(donated_compile)["temp_bytes"]
    growth = donated.temp_bytes - plain.temp_bytes
    saved = result.savings["footprint_bytes"]
    assert growth >= 1024 and saved > 0  # the case: a saving, and temporaries that grow
    assert result.verdict.summary.endswith(
        f"; donation saves {format_bytes(saved)} of footprint, although temporaries grow by "
        f"{format_bytes(growth)} with it"
    )


@pytest.mark.compile
def test_in_place_summary_with_a_plain_saving_adds_nothing() -> None:
    result = check_one(make_target(keep, keep_args, expect="in-place"))
    assert result.verdict.in_place
    assert result.savings["footprint_bytes"] > 0
    growth = result.variants["donated"].memory.temp_bytes - result.variants["plain"].memory.temp_bytes
    assert "saves nothing" not in result.verdict.summary
    assert ("temporaries grow by" in result.verdict.summary) == (growth >= 1024)


# ---- the option, unit-tested ------------------------------------------------------------


def test_parse_new_accepts_output_paths() -> None:
    assert parse_new(None, "--new") is None
    assert parse_new("out[1]", "--new") == ("out[1]",)
    assert parse_new(("out.logits, out['aux']", "out[1]", "out.logits"), "--new") == (
        "out.logits",
        "out['aux']",
        "out[1]",
    )
    assert parse_new(["out*loss"], "new=") == ("out*loss",)
    assert parse_new("", "--new") == ()


@pytest.mark.parametrize("value", ["logits", "output.x", "outs", "x.out"])
def test_parse_new_rejects_what_is_not_an_output_path(value: str) -> None:
    with pytest.raises(OptionError, match=f"--new '{value}' is not an output path"):
        parse_new(value, "--new")


def test_parse_new_rejects_other_types() -> None:
    with pytest.raises(OptionError, match="new=3 is not known"):
        parse_new(3, "new=")
    with pytest.raises(OptionError, match="not an output path"):
        parse_new(["out", 3], "new=")


def test_declared_new_matches_the_path_and_what_is_under_it() -> None:
    assert declared_new("out[1]", ("out[1]",))
    assert declared_new("out.aux['loss']", ("out.aux",))
    assert not declared_new("out.auxiliary", ("out.aux",))
    assert not declared_new("out[10]", ("out[1]",))
    assert declared_new("out", ("out",)) and declared_new("out[0].u", ("out",))
    assert declared_new("out.head.logits", ("out*logits",))
    assert not declared_new("out.head.logits_scale", ("out*logits",))
