"""``--run`` on an accelerator keeps the example arguments on the host (``fieldmem.driver.hosted``).

On a TPU or GPU the device's memory is the user's program's alone: the args factory's arrays are made in
host memory, the check compiles from stand-ins placed as the user's arrays are, and each call gets its
arguments put on the device right before it. CI has no accelerator: these tests turn the rule on for
XLA:CPU and hold the report, runs included, to the one made without it.
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from fieldmem.driver import hosted
from fieldmem.driver.execute import fresh_argument
from fieldmem.driver.placement import forget_stand_ins, host_copy, stood_for
from fieldmem.frontends.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

pytestmark = pytest.mark.compile


def test_arrays_become_stand_ins_with_host_copies_and_the_factory_s_arrays_go() -> None:
    made: list[Any] = []

    def factory() -> tuple[tuple, dict]:
        u = jnp.arange(12.0).reshape(3, 4)
        placed = jax.device_put(jnp.ones(4), jax.devices()[0])  # committed by the factory itself
        made.extend(weakref.ref(a) for a in (u, placed))
        return (u, placed, jnp.asarray(2.0) * 1, u), {"scale": 0.5, "key": jax.random.key(0)}

    (u, placed, scalar, again), kwargs = hosted.made_on_host(factory)
    try:
        assert isinstance(u, jax.ShapeDtypeStruct) and again is u  # one array given twice stays one
        assert stood_for(u) == (False, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
        np.testing.assert_array_equal(host_copy(u), np.arange(12.0).reshape(3, 4))
        assert isinstance(placed, jax.ShapeDtypeStruct) and stood_for(placed)[0] is True
        # kept as they are: a weakly typed array, a key array, a Python number
        assert isinstance(scalar, jax.Array) and scalar.weak_type
        assert kwargs["scale"] == 0.5 and jax.dtypes.issubdtype(kwargs["key"].dtype, jax.dtypes.prng_key)
        gc.collect()
        assert [ref() for ref in made] == [None, None]  # nothing holds the factory's arrays any more
        # a run's argument: a new array of the values, placed as the user's
        fresh = fresh_argument(u)
        assert isinstance(fresh, jax.Array) and not fresh.committed
        np.testing.assert_array_equal(np.asarray(fresh), np.arange(12.0).reshape(3, 4))
        assert fresh_argument(placed).committed
    finally:
        forget_stand_ins((u, placed))
    assert host_copy(u) is None


_DROPPED = ("seconds", "created")


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if not any(k.endswith(t) for t in _DROPPED)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _report(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, ["check", *args, "--no-isolate", "--no-cache", "-f", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_a_run_from_host_copies_gives_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    arguments = ["examples/field.py", "examples/sparse_row.py", "--run"]
    on_device = _report(arguments)
    calls: list[str | None] = []

    def keeps(backend: str | None) -> bool:
        calls.append(backend)
        return True

    monkeypatch.setattr(hosted, "keeps_on_host", keeps)
    from_host = _report(arguments)
    assert calls  # the rule was asked, and held
    assert _without_times(from_host["results"]) == _without_times(on_device["results"])
    for result in from_host["results"]:
        run = result["variants"]["donated"]["run"]
        assert run["aliases"] and all(a["confirmed"] for a in run["aliases"])
