"""Args factories traced, not run (fieldmem/driver/traced.py): the same report, or the factory runs.

A check needs the arguments' shapes, dtypes and placements, never their values, so the worker
traces each args factory instead of running it (no eager compiles, no memory for the arrays).
That is only allowed where it cannot change the program checked:

- in this process, :func:`traced_arguments` against running the same factory: the same shapes,
  dtypes and weak types, each standing for the uncommitted array a run makes; the leaves the
  trace does not touch are the factory's own objects; and every factory whose trace cannot
  stand for a run (it places arrays, reads a value, has an effect, returns one object twice)
  gives None, leaving the process able to run it;
- a factory that keeps what it made (a ``functools.cache``) is caught: ``ArgumentsLeaked``;
- through the command line, in fresh processes: the JSON reports are the same with factories
  traced and run (``FIELDMEM_TRACE_ARGS=0``) for library steps (flax nnx, equinox, optax),
  chains, host transfers, offloads, pmaps, bad factories, on CPU and without the device; and a
  factory that keeps a tracer is run in a fresh worker, with the same report.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fieldmem.driver.placement import stood_for
from fieldmem.driver.traced import ArgumentsLeaked, traced_arguments
from fieldmem.model.target import TargetResult
from tests.helpers_compile import make_target

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets"

BEFORE = jnp.arange(3.0)  # an array made before the factory runs: kept as it is
HOST = np.ones(3)  # a NumPy array: kept as it is


def _rich() -> tuple[tuple[Any, ...], dict[str, Any]]:
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {"w": jax.random.normal(k1, (8, 4)), "b": jnp.zeros(4, jnp.bfloat16)}
    return (params, jax.random.key_data(k2), jnp.asarray(0.5), BEFORE, HOST, 2.0, "name"), {
        "step": jnp.int32(3),
        "old_key": jax.random.PRNGKey(1),
    }


def _traced(make: Any) -> Any:
    return traced_arguments(make, getattr(make, "__name__", "factory"))


def test_a_traced_factory_gives_what_running_it_gives_as_abstract_values() -> None:
    ran = _rich()
    traced = _traced(_rich)
    assert traced is not None
    run_leaves, run_tree = jax.tree_util.tree_flatten(ran)
    traced_leaves, traced_tree = jax.tree_util.tree_flatten(traced)
    assert run_tree == traced_tree
    for run, leaf in zip(run_leaves, traced_leaves):
        if not isinstance(run, jax.Array) or run is BEFORE:
            assert leaf is run  # NumPy, Python values and arrays made before: the factory's own
            continue
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        assert (leaf.shape, leaf.dtype, leaf.weak_type) == (run.shape, run.dtype, run.weak_type)
        committed, sharding = stood_for(leaf)
        assert committed is run.committed is False
        assert sharding == run.sharding


def test_one_array_returned_twice_stays_one_object() -> None:
    def twice() -> tuple[tuple[Any, ...], dict[str, Any]]:
        u = jnp.zeros(4)
        return (u, u), {}

    traced = _traced(twice)
    assert traced is not None
    assert traced[0][0] is traced[0][1]


class _Opaque:
    """Not a pytree: a leaf, kept as the factory returned it."""


def test_a_leaf_given_twice_is_kept_as_one_object() -> None:
    opaque = _Opaque()

    def twice() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (opaque, opaque, 3, 3, jnp.zeros(2)), {}

    traced = _traced(twice)
    assert traced is not None
    assert traced[0][0] is traced[0][1] is opaque
    assert isinstance(traced[0][4], jax.ShapeDtypeStruct)


def _placed() -> tuple:
    return (jax.device_put(jnp.zeros(4), jax.devices()[0]),), {}


def _sharded() -> tuple:
    mesh = jax.make_mesh((1,), ("x",))
    return (jax.device_put(jnp.zeros(4), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))),), {}


def _constrained() -> tuple:
    mesh = jax.make_mesh((1,), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return (jax.jit(lambda: jnp.zeros(4), out_shardings=sharding)(),), {}


def _reads() -> tuple:
    return (float(jnp.zeros(3).sum()),), {}


def _to_numpy() -> tuple:
    return (np.asarray(jnp.zeros(3)),), {}


def _prints() -> tuple:
    u = jnp.zeros(3)
    jax.debug.print("made {}", u)
    return (u,), {}


def _raises() -> tuple:
    raise RuntimeError("no data file here")


@jax.tree_util.register_pytree_node_class
class _Node:
    """A pytree node of its own: rebuilt by unflattening, as an nnx module or variable is."""

    def __init__(self, u: Any) -> None:
        self.u = u

    def tree_flatten(self) -> tuple[tuple[Any], None]:
        return (self.u,), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any]) -> _Node:
        return cls(*children)


def _shared_node() -> tuple:
    node = _Node(jnp.zeros(3))
    return (node, node), {}


@pytest.mark.parametrize(
    "make",
    [_placed, _sharded, _constrained, _reads, _to_numpy, _prints, _raises, _shared_node],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_trace_that_cannot_stand_for_a_run_is_refused_and_the_factory_still_runs(make: Any) -> None:
    assert _traced(make) is None
    if make is _raises:
        with pytest.raises(RuntimeError):
            make()
    else:
        make()  # nothing kept from the trace: running it works


_KEPT: dict[str, Any] = {}


def _kept_in_a_dict() -> tuple:
    if "u" not in _KEPT:
        _KEPT["u"] = jnp.zeros(3)
    return (_KEPT["u"],), {}


@functools.cache
def _cached() -> jax.Array:
    return jnp.ones(3)


def _kept_in_a_cache() -> tuple:
    return (_cached(),), {}


@pytest.mark.parametrize("make", [_kept_in_a_dict, _kept_in_a_cache], ids=["dict", "functools.cache"])
def test_a_factory_that_keeps_a_tracer_is_caught(make: Any) -> None:
    try:
        with pytest.raises(ArgumentsLeaked, match="kept a traced array"):
            _traced(make)
    finally:
        _KEPT.clear()
        _cached.cache_clear()


def test_a_factory_that_fails_under_the_trace_and_keeps_a_tracer_is_caught() -> None:
    def keeps_then_reads() -> tuple:
        _KEPT["u"] = jnp.zeros(3)
        return (float(_KEPT["u"].sum()),), {}

    try:
        with pytest.raises(ArgumentsLeaked):
            _traced(keeps_then_reads)
    finally:
        _KEPT.clear()


# ---- through the command line, in fresh processes ------------------------------------------------------


def test_what_a_factory_prints_is_printed_once_traced_or_refused(capsys: pytest.CaptureFixture[str]) -> None:
    def prints() -> tuple:
        print("making the weights")
        return (jnp.zeros(3),), {}

    assert _traced(prints) is not None
    assert capsys.readouterr().out == "making the weights\n"

    def prints_then_reads() -> tuple:
        print("making the weights")
        return (float(jnp.zeros(3).sum()),), {}

    assert _traced(prints_then_reads) is None  # refused: the caller runs it, and it prints then
    assert capsys.readouterr().out == ""
    # the whole path, in a worker's hands: traced, refused, run; printed once
    from fieldmem.request.options import CheckOptions
    from fieldmem.worker.local_readers import LocalHands

    options = CheckOptions(jobs=1)
    target = make_target(lambda x: x + 1, prints_then_reads)
    hands = LocalHands(trace_arguments=True)
    with hands.session(options):
        hands.prepare(target, options)
    assert capsys.readouterr().out == "making the weights\n"


def _step(state: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: v * 2 for k, v in state.items()}


def _weights() -> tuple:
    return ({"w": jnp.ones((16, 16)), "b": jnp.zeros(16)},), {}


def test_a_released_target_leaves_no_stand_in_behind() -> None:
    from fieldmem.driver import placement
    from fieldmem.request.options import CheckOptions
    from fieldmem.worker.local_readers import LocalHands

    options = CheckOptions(jobs=1)
    target = make_target(_step, _weights, donate="0")
    hands = LocalHands(trace_arguments=True)
    before = set(placement._STOOD_FOR)
    with hands.session(options):
        hands.prepare(target, options)
        made = set(placement._STOOD_FOR) - before
        assert len(made) == 2  # the two traced arrays, standing in for what running the factory makes
        job = hands.start(target, options, None)
        hands.variants(job)
        hands.release(job)
    assert set(placement._STOOD_FOR) == before  # a long run's stand-ins do not pile up
    # a factory run, not traced, leaves nothing to forget: releasing its job forgets nothing else
    hands = LocalHands(trace_arguments=False)
    kept = placement.stand_in(jax.ShapeDtypeStruct((2,), jnp.float32), False, None)
    with hands.session(options):
        job = hands.start(target, options, None)
        hands.variants(job)
        hands.release(job)
    assert stood_for(kept) is not None
    placement.forget_stand_ins([kept])
    assert stood_for(kept) is None


def _sgd(params: jax.Array, opt: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    opt = 0.9 * opt + g
    return params - 0.1 * opt, opt


def test_a_chains_step_args_are_traced_with_its_arguments() -> None:
    from fieldmem.request.options import CheckOptions
    from fieldmem.request.target import ChainTarget, Step
    from fieldmem.worker.local_readers import LocalHands

    seen: list[bool] = []

    def gradient() -> tuple:
        g = jnp.full((8, 8), 0.5)
        seen.append(isinstance(g, jax.core.Tracer))
        return (g,), {}

    def reads() -> tuple:  # refused: run as the chain's step comes
        seen.append(False)
        return (jnp.full((8, 8), float(jnp.ones(()))),), {}

    first = make_target(_sgd, lambda: (jnp.ones((8, 8)), jnp.zeros((8, 8))), name="sgd")
    options = CheckOptions(jobs=1)
    for factory, expected in ((gradient, [True]), (reads, [False])):
        seen.clear()
        chain = ChainTarget(first=first, steps=(Step("a", _sgd, None, factory), Step("b", _sgd, None, factory)))
        hands = LocalHands(trace_arguments=True)
        with hands.session(options):
            hands.prepare(chain, options)
            assert seen == expected * 2  # each step's, before the chain starts
            jobs = hands.chain(chain, options)
            job = next(jobs)
            while True:
                assert not isinstance(job.job, TargetResult), job.job
                hands.variants(job.job)
                try:
                    job = jobs.send(True)
                except StopIteration:
                    break
        # traced: not called again as the steps start; refused: run once more for each step
        assert seen == expected * (2 if expected == [True] else 4)


def _check(tmp_path: Path, label: str, trace: bool, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / f"{label}-{int(trace)}.json"
    env = dict(os.environ, FIELDMEM_TRACE_ARGS="1" if trace else "0", JAX_PLATFORMS="cpu", COLUMNS="120")
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args, "-f", "json", "-o", str(out)],
        cwd=ASSETS,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1, 2), done.stderr
    documents = {}
    for path in sorted(tmp_path.glob(f"{label}-{int(trace)}*.json")):
        documents[path.name.removeprefix(f"{label}-{int(trace)}")] = _steady(json.loads(path.read_text()))
    assert documents, done.stderr
    return documents, done.stderr


def _steady(value: Any) -> Any:
    """A report without what differs between two runs of one check: wall times and the clock."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if not (k.endswith("seconds") or k == "created")}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


LIBRARY_STEPS = [
    *("wrapped_steps.py:nnx_step", "--args", "nnx_args"),
    *("wrapped_steps.py:nnx_adamw_step", "--args", "nnx_adamw_args"),
    *("wrapped_steps.py:eqx_step", "--args", "eqx_args"),
    *("wrapped_steps.py:scaled_update", "--args", "scaled_args"),
    *("wrapped_steps.py:solver.advance", "--args", "stepper_args"),
    *("wrapped_steps.py:decorated_update", "--args", "one_array"),
]
REGISTERED = [
    "models.py",
    "creating_chain.py",
    "gradient_chain.py",
    "offload_steps.py",
    "pmapped_steps.py",
    "run_scalars.py",
    "transfer_steps.py",
    "bad_cases.py",
]


@pytest.mark.parametrize(
    ("label", "args"),
    [
        ("library", [*LIBRARY_STEPS, "--backend", "cpu,tpu:v5e"]),
        ("registered", [*REGISTERED, "--devices", "4"]),
    ],
)
def test_reports_are_the_same_with_factories_traced_or_run(tmp_path: Path, label: str, args: list[str]) -> None:
    traced, _ = _check(tmp_path, label, True, *args)
    ran, _ = _check(tmp_path, label, False, *args)
    assert traced == ran


def test_a_factory_that_keeps_a_tracer_is_run_in_a_fresh_worker_with_the_same_report(tmp_path: Path) -> None:
    traced, said = _check(tmp_path, "kept", True, "kept_factories.py")
    lines = [line for line in said.splitlines() if line.startswith("kept_factories:")]
    # the first target's factory traced; the second's traced and caught keeping it; then all run afresh
    assert lines == [
        "kept_factories: double_args traced",
        "kept_factories: params traced",
        "kept_factories: params run",
    ]
    ran, said = _check(tmp_path, "kept", False, "kept_factories.py")
    assert [line for line in said.splitlines() if line.startswith("kept_factories:")] == [
        "kept_factories: double_args run",
        "kept_factories: params run",
    ]
    assert traced == ran
    (report,) = traced.values()
    assert [r["error"] for r in report["results"]] == [None, None, None]


def test_a_run_calls_its_factories(tmp_path: Path) -> None:
    _, said = _check(tmp_path, "run", True, "kept_factories.py:double", "--args", "double_args", "--run")
    assert [line for line in said.splitlines() if line.startswith("kept_factories:")] == [
        "kept_factories: double_args run"
    ]
