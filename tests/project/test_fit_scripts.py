"""``hardware/fit_chip.py`` (the chip's side, run by whoever has a TPU v5e) and ``hardware/fit_verify.py``
(plain jax against a fit document): which points they take from a document, and what they do without a TPU.

No TPU is lent to these tests: the chip script is held to its plan and to its one line and exit code 2 here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_fit import Stand, _linear

from fieldmem.model.fit_report import FitReport
from fieldmem.parent.fit import search
from fieldmem.render import RenderOptions
from fieldmem.render.fit import render_json
from fieldmem.request.fit import fit_plan, parse_knobs

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "hardware" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _document(
    target: str = "tests/assets/fit_steps.py:stencil", args: str = "tests/assets/fit_steps.py:make_grid"
) -> dict[str, Any]:
    plan = fit_plan(target, parse_knobs(["n=1..512", "kind=a,b"]), args=args)
    found = search(plan, Stand(_linear(GiB // 8, knob="n")), backend="tpu:v5e", min_bytes=1024)
    return json.loads(render_json(FitReport("0.1.0", (found,)), RenderOptions()))


def test_the_chip_runs_each_rows_largest_value_and_the_next_one_up() -> None:
    fit_chip = _load("fit_chip")
    points = fit_chip.plan_points(_document())
    assert [(p["values"], p["reported"]) for p in points] == [
        ({"kind": "a", "n": 128}, "fits"),
        ({"kind": "a", "n": 129}, "does not fit"),
        ({"kind": "b", "n": 128}, "fits"),
        ({"kind": "b", "n": 129}, "does not fit"),
    ]
    assert points[0]["reported_footprint_bytes"] == 16 * GiB and points[0]["args"].endswith(":make_grid")
    with pytest.raises(ValueError, match="no search on gpu:h100"):
        fit_chip.plan_points(_document(), "gpu:h100")
    with pytest.raises(ValueError, match="not a fieldmem fit document"):
        fit_chip.plan_points({"schema": "fieldmem.report/2"})
    assert fit_chip.out_of_memory("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17.2G")
    assert not fit_chip.out_of_memory("INVALID_ARGUMENT: shapes differ")


def test_the_chip_script_writes_each_point_as_it_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run saw is on disk after each point: a run stopped midway keeps it, and does not agree."""
    fit_chip = _load("fit_chip")
    report = tmp_path / "fit.json"
    report.write_text(json.dumps(_document()))
    out = tmp_path / "chip.json"
    stop = [3]  # the points after which the run is stopped

    def child(point: dict[str, Any], timeout: float) -> dict[str, Any]:
        if stop[0] == 0:
            raise RuntimeError("the machine was taken back")
        stop[0] -= 1
        return {"outcome": "ran" if point["reported"] == "fits" else "out-of-memory", "peak_bytes_in_use": 1}

    monkeypatch.setattr(fit_chip, "_child", child)
    with pytest.raises(RuntimeError, match="taken back"):
        fit_chip.main([str(out), "--report", str(report)])
    stopped = json.loads(out.read_text())
    assert [p["agrees"] for p in stopped["points"]] == [True, True, True]
    assert stopped["planned"] == 4 and stopped["agrees"] is False
    stop[0] = 4
    assert fit_chip.main([str(out), "--report", str(report)]) == 0
    finished = json.loads(out.read_text())
    assert len(finished["points"]) == 4 and finished["agrees"] is True


@pytest.mark.compile
def test_without_a_tpu_the_chip_script_says_so_in_one_line(tmp_path: Path) -> None:
    report = tmp_path / "fit.json"
    report.write_text(json.dumps(_document()))
    out = tmp_path / "chip.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "hardware" / "fit_chip.py"), str(out), "--report", str(report)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "not a TPU: run this on a machine with a TPU v5e" in done.stderr.strip().splitlines()[-1]
    assert not out.exists()


def test_the_fit_page_and_its_picture_are_what_the_stored_documents_make() -> None:
    """docs/fit.md's blocks (the example's output, the backends' table, the plain-jax compiles) and
    docs/images/fit-frontier.svg are made from hardware/results/fit-block-*.json by docs/make_fit_docs.py:
    a renderer or a document that changed without them fails here (the fix: run the script)."""
    spec = importlib.util.spec_from_file_location("make_fit_docs", ROOT / "docs" / "make_fit_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0


@pytest.mark.compile
def test_the_examples_factory_and_step_agree_under_each_remat_policy() -> None:
    """examples/fit/block.py, at a small size: its factory's arguments trace through its step under each policy
    (what docs/fit.md's searches compile at full size), and a policy it does not know is refused by name."""
    import jax

    block = _load_example()
    for remat in ("none", "dots", "full"):
        args, kwargs = block.make_args(batch=2, seq=8, remat=remat)
        params, opt_state, loss = jax.eval_shape(block.train_step, *args, **kwargs)
        assert loss.shape == () and args[2].shape == (2, 9)
        assert jax.tree.structure(params) == jax.tree.structure(args[0])
        assert jax.tree.structure(opt_state) == jax.tree.structure(args[1])
    with pytest.raises(ValueError, match="remat='offload': use one of none, dots, full"):
        block.make_args(remat="offload")


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("_fieldmem_fit_block", ROOT / "examples" / "fit" / "block.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # flax's dataclasses look their module up (the test's fixture drops it)
    spec.loader.exec_module(module)
    return module
