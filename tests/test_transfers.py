"""Issue 28, parts 2 and 3: donations lost to a move, and what jax copies onto the devices before every call.

A ``jax.jit`` with ``in_shardings`` over 4 simulated CPU devices, given arrays made on one device, is
reported with its donation lost (statically), and ``--run`` agrees: the input is not deleted, and jax's
transfer guard logs the copies the plan predicts. A step taking a NumPy array reports its copy per call, a
chain of three per step; an optimizer state in ``pinned_host`` memory is shown in host memory, with XLA:CPU's
``host_*`` figures (0 there) unavailable and why. The assets are tests/assets/transfer_steps.py.
"""

from __future__ import annotations

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

from fieldmem.api import check_function
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.report import Report

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "tests" / "assets"
STEPS = ASSETS / "transfer_steps.py"
KIB = 1024


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``fieldmem check transfer_steps.py --devices 4 --run -f json``, once for the module: its JSON."""
    out = tmp_path_factory.mktemp("transfers") / "report.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fieldmem",
            "check",
            str(STEPS),
            "--devices",
            "4",
            "--run",
            "-f",
            "json",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=out.parent,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def _result(data: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for r in data["results"] if r["name"] == name]
    assert found["status"] == "ok", found["error"]
    return found


def test_a_sharded_jit_given_one_device_arrays_loses_its_donation_and_the_run_agrees(
    four_devices: dict[str, Any],
) -> None:
    result = _result(four_devices, "transfers:sharded")
    assert result["devices"] == [0, 1, 2, 3]
    # the program aliases w -> out (what XLA planned), but jax moves w first: the plan's alias is a moved copy's
    assert [(a["input"], a["output"]) for a in result["variants"]["donated"]["aliases"]] == [("w", "out")]
    verdict = result["verdict"]
    assert verdict["kind"] == "not-in-place"
    lost = [f for f in verdict["findings"] if f["code"] == "resharded-donation"]
    assert [(f["severity"], f["input"], f["output"], f["bytes"]) for f in lost] == [("error", "w", "out", 16 * KIB)]
    assert verdict["summary"].startswith(
        "not in place: w is donated, but it is given on cpu:0 (uncommitted) and the program takes it as "
        "P('x') over mesh(x=4): jax moves it there before every call (16.0 KiB, 4.0 KiB on each of 4 devices) "
        "and donates the moved copy"
    )
    assert "jax.device_put" in lost[0]["message"]
    transfers = result["transfers"]
    by_input = {t["input"]: t for t in transfers["leaves"]}
    assert set(by_input) == {"w", "g"}
    w = by_input["w"]
    assert (w["kind"], w["bytes"], w["device_bytes"], w["devices"], w["donated"], w["held_bytes"]) == (
        "across-devices",
        16 * KIB,
        4 * KIB,
        4,
        True,
        16 * KIB,
    )
    assert (w["given"], w["wanted"]) == ("on cpu:0 (uncommitted)", "P('x') over mesh(x=4)")
    assert by_input["g"]["donated"] is False
    assert transfers["bytes_per_call"] == 32 * KIB
    # the undonated g moves too: a warning, not a break
    assert [f["severity"] for f in verdict["findings"] if f["code"] == "transfer"] == ["warning"]

    # --run: the donated input is not deleted, its alias is not confirmed, and jax logs the planned copies
    run = result["variants"]["donated"]["run"]
    assert run["kept"] == ["w"] and run["deleted"] == []
    (alias,) = run["aliases"]
    assert not alias["confirmed"] and "jax moved w before the call and donated the moved copy" in alias["detail"]
    assert any(f["code"] == "run-alias-missing" for f in verdict["findings"])
    assert transfers["run"] == {
        "planned": 32 * KIB,
        "bytes": 32 * KIB,
        "agrees": True,
        "detail": "jax's transfer guard logged 32.0 KiB copied onto the devices for the call, as planned",
        "unavailable": None,
    }


def test_a_function_calling_a_pmapped_step_on_one_device_arrays_loses_its_donation(
    four_devices: dict[str, Any],
) -> None:
    """The issue's case: ``params['w'] -> out['w']`` is planned, and at run time none happens."""
    result = _result(four_devices, "transfers:pmap_caller")
    assert [(a["input"], a["output"]) for a in result["variants"]["donated"]["aliases"]] == [
        ("params['w']", "out['w']")
    ]
    assert result["verdict"]["kind"] == "not-in-place"
    (lost,) = [f for f in result["verdict"]["findings"] if f["code"] == "resharded-donation"]
    assert lost["input"] == "params['w']" and lost["bytes"] == 16 * KIB  # the buffer left alive on device 0
    (w,) = [t for t in result["transfers"]["leaves"] if t["input"] == "params['w']"]
    assert (w["kind"], w["bytes"], w["device_bytes"], w["devices"]) == ("across-devices", 16 * KIB, 4 * KIB, 4)
    run = result["variants"]["donated"]["run"]
    assert run["kept"] == ["params['w']"] and not run["aliases"][0]["confirmed"]
    assert result["transfers"]["run"]["agrees"]


def test_the_same_jit_given_its_arguments_where_it_takes_them_is_in_place(four_devices: dict[str, Any]) -> None:
    result = _result(four_devices, "transfers:placed")
    assert result["verdict"]["kind"] == "in-place"
    assert result["transfers"] is None
    assert result["variants"]["donated"]["run"]["deleted"] == ["w"]


def test_a_numpy_batch_is_copied_on_every_call_and_the_run_measures_it(four_devices: dict[str, Any]) -> None:
    result = _result(four_devices, "transfers:numpy")
    assert result["verdict"]["kind"] == "in-place"  # the copy from the host is a transfer, not a break
    transfers = result["transfers"]
    (batch,) = transfers["leaves"]
    assert (batch["input"], batch["kind"], batch["bytes"], batch["given"], batch["donated"]) == (
        "batch",
        "host-to-device",
        8 * KIB,
        "a NumPy array on the host",
        False,
    )
    assert transfers["bytes_per_call"] == 8 * KIB
    assert transfers["summary"].startswith("jax copies 8.0 KiB onto the devices before every call (1 leaf: 1 from")
    assert transfers["run"]["agrees"] and transfers["run"]["bytes"] == 8 * KIB
    notes = [f for f in result["verdict"]["findings"] if f["code"] == "transfer"]
    assert [(f["severity"], f["input"], f["bytes"]) for f in notes] == [("info", "batch", 8 * KIB)]


def test_a_chain_of_three_numpy_steps_copies_per_step(four_devices: dict[str, Any]) -> None:
    (chain,) = four_devices["chains"]
    assert chain["in_place"]
    assert [s["transfer_bytes"] for s in chain["steps"]] == [8 * KIB] * 3
    assert chain["transfer_bytes"] == 24 * KIB
    fused = _result(four_devices, chain["fused"])
    assert fused["transfers"]["bytes_per_call"] == 24 * KIB  # the fused chain takes every step's batch at once


def test_the_report_reads_back_and_every_format_shows_the_transfers(four_devices: dict[str, Any]) -> None:
    report = Report.from_dict(four_devices)
    assert report.to_dict()["results"] == four_devices["results"]
    sharded = next(r for r in report.results if r.name == "transfers:sharded")
    assert sharded.transfers is not None and sharded.transfers.leaves[0].input == "w"
    table = get_renderer("table").render(report, RenderOptions(verbose=True, width=200))
    assert "transfers: jax copies 32.0 KiB onto the devices before every call" in table
    assert "w: 16.0 KiB across devices per call (4.0 KiB on each of 4 devices), given on cpu:0 (uncommitted)" in table
    assert "transfers before each call: step 1 8.0 KiB, step 2 8.0 KiB, step 3 8.0 KiB; 24.0 KiB per pass" in table
    markdown = get_renderer("markdown").render(report, RenderOptions(verbose=True))
    assert "- transfers: jax copies 32.0 KiB onto the devices before every call" in markdown
    assert "24.0 KiB per pass through the steps" in markdown
    html = get_renderer("html").render(report, RenderOptions(verbose=True))
    assert "transfers: jax copies 32.0 KiB onto the devices before every call" in html
    assert "24.0 KiB per pass through the steps" in html
    assert '"resharded-donation"' in get_renderer("json").render(report, RenderOptions())


def test_a_leaf_name_in_the_transfers_is_shown_escaped() -> None:
    """A keyword argument whose name holds an escape sequence reaches the transfers lines as its escape
    (fieldmem.escaping), never as a control."""
    name = "b\x1b[2J"
    report = check_function(
        lambda u, **kw: u + kw[name].mean(), jnp.zeros((64, 64), jnp.float32), **{name: np.ones((64, 64), np.float32)}
    )
    (result,) = report.results
    assert result.transfers is not None and result.transfers.leaves[0].input == name
    for renderer in ("table", "markdown", "html"):
        text = get_renderer(renderer).render(report, RenderOptions(verbose=True, width=200))
        assert "\x1b" not in text, renderer
        assert "transfers: jax copies 16.0 KiB onto the devices" in text, renderer
        assert "x1b" in text, renderer  # as its escape (markdown escapes the brackets after it too)


def test_an_offloaded_optimizer_state_shows_in_host_memory() -> None:
    """jax 0.10.2 places arrays and program arguments in ``pinned_host`` on CPU, but XLA:CPU's
    ``memory_analysis()`` counts them in the device figures and gives 0 for every ``host_*`` one: fieldmem
    names the leaves held in host memory, and makes those figures unavailable, with why."""
    sys.path.insert(0, str(ASSETS))
    try:
        import transfer_steps
    finally:
        sys.path.remove(str(ASSETS))
    opt, g = transfer_steps._offloaded()
    analysis = jax.jit(transfer_steps.offload_step, donate_argnums=0).lower(opt, g).compile().memory_analysis()
    assert analysis.host_argument_size_in_bytes == 0 and analysis.argument_size_in_bytes == 32 * KIB  # XLA:CPU's

    report = check_function(transfer_steps.offload_step, *transfer_steps._offloaded(), donate="opt", run=True)
    (result,) = report.results
    assert result.status == "ok", result.error
    assert [(i.path, i.memory_kind) for i in result.inputs] == [("opt", "pinned_host"), ("g", None)]
    assert [(o.path, o.memory_kind) for o in result.outputs] == [("out", "pinned_host")]
    assert result.inputs[0].sharding == "P() over mesh(x=1) in pinned_host"
    transfers = result.transfers
    assert transfers is not None and not transfers.leaves
    assert (transfers.offloaded_inputs, transfers.offloaded_outputs) == (("opt",), ("out",))
    assert (transfers.offloaded_argument_bytes, transfers.offloaded_output_bytes) == (16 * KIB, 16 * KIB)
    memory = result.variants["donated"].memory
    assert memory.host_argument_bytes is None and memory.host_output_bytes is None
    assert memory.host_alias_bytes is None and memory.host_temp_bytes == 0
    assert memory.unavailable["host_argument_bytes"].startswith(
        "memory_analysis() gives 0, though the program holds 16.0 KiB of arguments in host memory (pinned_host)"
    )
    assert result.verdict is not None and result.verdict.kind == "in-place"
    table = get_renderer("table").render(report, RenderOptions(verbose=True, width=200))
    assert "host_argument_bytes" in table and "in host memory (offloaded)" in table


def test_arguments_already_where_the_program_takes_them_move_nothing() -> None:
    """A plain jit of device arrays and a Python scalar: only the scalar is copied (4 bytes, below every
    threshold: no finding), and nothing is offloaded."""
    report = check_function(lambda u, s: u * s, jnp.ones((64, 64), jnp.float32), 2.0)
    (result,) = report.results
    assert result.transfers is not None
    (scalar,) = result.transfers.leaves
    assert (scalar.input, scalar.kind, scalar.bytes, scalar.given) == (
        "s",
        "host-to-device",
        4,
        "a Python number on the host",
    )
    assert result.verdict is not None and not any(f.code == "transfer" for f in result.verdict.findings)
    report = check_function(lambda u: u * 2.0, jnp.ones((64, 64), jnp.float32))
    assert report.results[0].transfers is None
