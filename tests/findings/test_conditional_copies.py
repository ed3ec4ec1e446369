"""A copy inside a ``lax.cond`` branch inside a loop, from a real compile.

jax-md's neighbour-list update rebuilds inside a ``cond`` in a ``fori_loop``: the copy
XLA keeps is made only when the rebuild branch runs, so it is not "every iteration",
and the value copied is not the loop carry. fieldmem must say "when the branch runs",
name the branch and the ``cond``'s line, and give no carry explanation. What the
report claims is checked against the compiled program's own text: the copy it names
is in a computation that a ``conditional`` calls as a branch.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import fieldmem

from helpers_compile import compile_quietly

pytestmark = pytest.mark.compile

N = 4096  # s32: 16 KiB, above the default --min-bytes


def rebuild_in_a_loop(state: Any, x: jax.Array) -> Any:
    def body(i: jax.Array, carry: Any) -> Any:
        s, a, b = carry

        def rebuild(ab: Any) -> Any:
            full = jnp.broadcast_to(jnp.int32(-1), ab[0].shape)
            return full, full  # one value returned twice: XLA copies it into the second

        def keep(ab: Any) -> Any:
            return ab

        a, b = lax.cond(x[i] > 100.0, rebuild, keep, (a, b))  # the cond
        return s + x[i], a, b

    return lax.fori_loop(0, 10, body, state)


def arguments() -> tuple[Any, jax.Array]:
    return (jnp.zeros(1024), jnp.zeros(N, jnp.int32), jnp.zeros(N, jnp.int32)), jnp.ones(10)


def _line(fn: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _display(file: str) -> str:
    relative = os.path.relpath(file)
    return relative if not relative.startswith("..") else file


def test_a_copy_in_a_cond_branch_in_a_loop_is_conditional() -> None:
    jitted = jax.jit(rebuild_in_a_loop, donate_argnums=0)
    (result,) = fieldmem.check_function(jitted, *arguments(), name="rebuild").results
    assert result.status == "ok", result.error
    donated = result.variants["donated"]
    [copy] = [c for c in donated.copies if c.bytes == N * 4]
    cond_line = f"{_display(__file__)}:{_line(rebuild_in_a_loop, '# the cond')}"
    assert copy.kind == "conditional"
    # jax lowers lax.cond(pred, rebuild, keep) to an index conditional: branch 1 is rebuild
    assert (copy.branch, copy.branch_source) == ("1", cond_line)
    # at most once per iteration, so not multiplied out as if every iteration paid it
    assert (copy.trip_count, copy.bytes_per_call) == (10, None)
    assert copy.cause is None  # the copied value is a broadcast, not the loop carry

    # what the compiled program says: the copy is in a computation some conditional calls as a branch
    text = compile_quietly(jitted, *arguments()).as_text()
    branch_lists = re.findall(r"conditional\(.*?branch_computations=\{([^}]*)\}", text)
    branches = [b.strip().lstrip("%") for found in branch_lists for b in found.split(",")]
    assert copy.computation in branches
    assert re.search(rf"%{re.escape(copy.instruction)} = \S+ copy\(", text)

    [finding] = [f for f in result.verdict.findings if f.code == "conditional-copy"]
    assert finding.severity == "warning"
    assert f"when branch 1 (true_fun of a lax.cond) of the conditional at {cond_line} runs" in finding.message
    assert "at most x10 per call" in finding.message
    assert "every iteration" not in finding.message and "carry" not in finding.message
    assert not [f for f in result.verdict.findings if f.code == "loop-copy" and f.source == copy.source]
    # the state is updated in place; the branch copy alone does not break it
    assert result.verdict.in_place
