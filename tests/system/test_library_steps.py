"""Optimizer steps written with optax, checked against runtime truth.

These are the steps users train with: `optax.adamw`, and `optax.chain(clip_by_global_norm, adam)`,
over a dict MLP. Each is jitted the usual way, `jax.jit(step, donate_argnums=(0, 1))`.
fieldmem's report is compared with what plain jax does when the user's own jit object runs
on fresh arguments. Every output whose buffer pointer equals a donated input's pointer is an
alias, and fieldmem must report exactly those aliases, no more and no fewer. Every donated
input must be deleted after the call. XLA's figures must equal `memory_analysis()` of the
same jit object. (The flax linen TrainState step is in test_run.py, the nnx and equinox
steps in test_wrappers.py, the typed-key Langevin step in test_arguments.py.)
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import fieldmem

from helpers_compile import UNUSABLE_WARNING, compile_quietly, output_leaves, report_leaves, xla_memory

pytestmark = pytest.mark.compile

optax = pytest.importorskip("optax")


def _mlp(key: jax.Array) -> dict[str, dict[str, jax.Array]]:
    k1, k2 = jax.random.split(key)
    return {
        "dense1": {"kernel": jax.random.normal(k1, (32, 64)), "bias": jnp.zeros(64)},
        "dense2": {"kernel": jax.random.normal(k2, (64, 8)), "bias": jnp.zeros(8)},
    }


def _loss(params: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["dense1"]["kernel"] + params["dense1"]["bias"])
    return jnp.mean((h @ params["dense2"]["kernel"] + params["dense2"]["bias"]) ** 2)


def _step_for(tx: Any) -> Callable[..., Any]:
    def step(params: dict[str, Any], opt_state: Any, x: jax.Array) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(_loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _arguments(tx: Any) -> tuple[Any, Any, jax.Array]:
    params = _mlp(jax.random.key(0))
    return params, tx.init(params), jnp.ones((4, 32))


def _runtime_aliases(jitted: Any, args: tuple[Any, ...]) -> tuple[set[tuple[str, str]], list[str]]:
    """(input path, output path) pairs whose buffers the call reused, and the donated inputs left alive."""
    names = ["params", "opt_state", "x"]
    inputs = report_leaves(args, {}, names)
    pointers = {leaf.unsafe_buffer_pointer(): path for path, leaf in inputs if isinstance(leaf, jax.Array)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        out = jitted(*args)
    jax.block_until_ready(out)
    reused = {
        (pointers[leaf.unsafe_buffer_pointer()], path)
        for path, leaf in output_leaves(out)
        if leaf.unsafe_buffer_pointer() in pointers
    }
    alive = [path for path, leaf in inputs if path.startswith(("params", "opt_state")) and not leaf.is_deleted()]
    return reused, alive


@pytest.mark.parametrize(
    ("name", "make_tx"),
    [
        ("adamw", lambda: optax.adamw(1e-3, weight_decay=1e-4)),
        ("clip+adam", lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))),
    ],
)
def test_an_optax_step_agrees_with_the_runtime(name: str, make_tx: Callable[[], Any]) -> None:
    tx = make_tx()
    jitted = jax.jit(_step_for(tx), donate_argnums=(0, 1))
    report = fieldmem.check_function(jitted, *_arguments(tx), name=name)
    (result,) = report.results
    assert result.status == "ok", result.error
    donated = result.variants["donated"]

    # XLA's figures are those of the user's own jit object
    compiled = compile_quietly(jitted, *_arguments(tx))
    expected = xla_memory(compiled)
    for figure, value in expected.items():
        if figure != "generated_code_bytes":
            assert getattr(donated.memory, figure) == value, figure

    # every reused buffer, and only those, is reported as an alias
    claimed = {(alias.input, alias.output) for alias in donated.aliases}
    reused, alive = _runtime_aliases(jitted, _arguments(tx))
    assert claimed == reused
    assert alive == []
    # the whole state is updated in place: every parameter and optimizer leaf of a real size is reused
    state = [i.path for i in result.inputs if i.path.startswith(("params", "opt_state")) and i.bytes >= 1024]
    assert state and set(state) <= {i for i, _ in claimed}
    assert not [u for u in donated.unusable_donations if u.bytes >= 1024]
    # the copies reported are the copy instructions XLA kept in the user's compiled program
    text = compiled.as_text()
    kept = [line for line in text.splitlines() if re.search(r"= \S+ copy(-start)?\(", line)]
    assert len(donated.copies) == len(kept), (donated.copies, kept)


def _without_codegen(report: fieldmem.Report) -> dict[str, Any]:
    """The report as JSON less what the code generation level may change: timings, the code size, the record of it."""
    volatile = {"lower_seconds", "compile_seconds", "generated_code_bytes", "fast_compile", "unavailable", "created"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(report.to_dict())


@pytest.mark.parametrize(
    ("name", "make_tx"),
    [
        ("adamw", lambda: optax.adamw(1e-3, weight_decay=1e-4)),
        ("clip+adam", lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))),
    ],
)
def test_the_cheap_code_generation_gives_the_same_findings_on_a_library_step(
    name: str, make_tx: Callable[[], Any]
) -> None:
    """A static check compiles at -O0 by default; on a real optimizer step every finding and figure but the
    code size is what XLA's default code generation gives, and the report says which one each variant had."""
    tx = make_tx()
    jitted = jax.jit(_step_for(tx), donate_argnums=(0, 1))
    fast = fieldmem.check_function(jitted, *_arguments(tx), name=name, min_bytes=0)
    full = fieldmem.check_function(jitted, *_arguments(tx), name=name, min_bytes=0, fast_compile=False)
    for report, used in ((fast, True), (full, False)):
        for variant in report.results[0].variants.values():
            assert variant.fast_compile is used
            assert (variant.memory.generated_code_bytes is None) is used
    assert _without_codegen(fast) == _without_codegen(full)
