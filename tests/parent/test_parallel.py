"""Independent targets compile concurrently (``--jobs`` > 1): same results, same order, errors in place.

Lowering stays on the calling thread; the compiles of up to ``jobs`` targets
run in a pool while the next target is lowered. The report must not depend
on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest

from fieldmem.model.errors import TargetError
from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions

from factories import without_timings
from helpers_compile import make_target

pytestmark = pytest.mark.compile


def _update(k: int) -> Any:
    def update(u, v):
        return u.at[k].set(v[k] * 2.0), v * 0.5

    update.__qualname__ = f"update{k}"
    return update


def _broken(u):
    raise ValueError("this one does not trace")


def test_pipelined_targets_give_the_sequential_report_in_order(tmp_path: Path) -> None:
    factory = lambda: (jnp.zeros((64, 128)), jnp.ones((64, 128)))  # noqa: E731
    targets: list[Any] = [make_target(_update(k), factory, name=f"t:update{k}") for k in range(5)]
    targets.insert(2, make_target(_broken, lambda: (jnp.zeros(4),), name="t:broken"))
    targets.insert(4, ("t:missing", TargetError("module 't' not found")))
    sequential = check_targets(targets, CheckOptions(jobs=1))
    pipelined = check_targets(targets, CheckOptions(jobs=3))
    names = [r.name for r in pipelined.results]
    assert names == ["t:update0", "t:update1", "t:broken", "t:update2", "t:missing", "t:update3", "t:update4"]
    assert [r.status for r in pipelined.results].count("error") == 2
    assert "does not trace" in pipelined.results[2].error.message
    assert without_timings(pipelined.to_dict()) == without_timings(sequential.to_dict())
