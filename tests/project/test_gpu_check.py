"""``make gpu-check`` (hardware/gpu_check.py): its no-GPU path, and its table from a recorded fake reading.

No GPU is lent to these tests, so the measured side is a real ``--run`` report
of this machine's CPU whose ``memory_stats()`` peaks (which the CPU does not
give) are filled with made-up numbers, labelled as such; the predicted side is
a real ``--backend gpu:h100`` compile without the device.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hardware" / "gpu_check.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(JAX_PLATFORMS="cpu"),  # jax sees no GPU, whatever the machine has
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: jax finds no GPU here"), done.stderr
    assert lines[0].endswith("run it on a machine with an NVIDIA GPU")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not out.exists()  # nothing written


def test_half_a_recorded_pair_is_refused(tmp_path: Path) -> None:
    assert gpu_check.main(["--predicted", str(tmp_path / "p.json"), "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize(
    ("device_kind", "asked", "kind"),
    [("NVIDIA H200", "auto", "h200"), ("NVIDIA H100 80GB HBM3", "auto", "h100"), ("Tesla T4", "auto", "h100")],
)
def test_the_prediction_uses_the_gpu_s_own_kind(device_kind: str, asked: str, kind: str) -> None:
    assert gpu_check.predicted_kind(device_kind, asked) == kind
    assert gpu_check.predicted_kind(device_kind, "a100") == "a100"


def _report(tmp_path: Path, name: str, *options: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "examples/sparse_row.py", "--min-bytes", "0"]
        + ["-f", "json", "-o", str(out), *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(out.read_text())


FAKE_EXTRA = 4096  # made up: the recorded reading's peak is the prediction plus this


@pytest.mark.compile
def test_the_table_from_a_recorded_fake_reading(tmp_path: Path) -> None:
    pytest.importorskip("jax_plugins.xla_cuda12", reason='the GPU extra is not installed: pip install "fieldmem[gpu]"')
    predicted = _report(tmp_path, "predicted", "--backend", "gpu:h100")
    measured = _report(tmp_path, "measured", "--run")
    # the fake reading: a GPU's device kind, and memory_stats() peaks the CPU does not give
    fake = copy.deepcopy(measured)
    fake["backend"] = "gpu"
    fake["devices"] = [{"id": 0, "platform": "gpu", "kind": "NVIDIA H200 (recorded fake)"}]
    prediction = {r["name"]: r for r in predicted["results"]}
    for result in fake["results"]:
        for variant, data in result["variants"].items():
            footprint = prediction[result["name"]]["variants"][variant]["memory"]["footprint_bytes"]
            for device in data["run"]["devices"]:
                device.update(measured_peak=footprint + FAKE_EXTRA, unavailable=None)
    fake["results"] = [r for r in fake["results"] if r["name"] != "sparse_row:write_kv"]  # one target missing

    document = gpu_check.write_results(predicted, fake, tmp_path / "out", date="2026-12-03")
    assert document["gpu"] == "NVIDIA H200 (recorded fake)" and document["predicted_backend"] == "gpu:h100"
    rows = {(r["target"], r["variant"]): r for r in document["rows"]}
    assert set(rows) == {(t, v) for t in ("sparse_row:set_row", "sparse_row:write_kv") for v in ("plain", "donated")}
    for variant in ("plain", "donated"):
        row = rows[("sparse_row:set_row", variant)]
        expected = prediction["sparse_row:set_row"]["variants"][variant]["memory"]
        assert row["predicted"]["footprint_bytes"] == expected["footprint_bytes"]
        assert (
            row["compiled_on_gpu"]["footprint_bytes"]
            == measured["results"][0]["variants"][variant]["memory"]["footprint_bytes"]
        )
        assert row["measured_peak_bytes"] == expected["footprint_bytes"] + FAKE_EXTRA
        assert row["measured_minus_predicted_footprint"] == FAKE_EXTRA
        missing = rows[("sparse_row:write_kv", variant)]
        assert missing["status"]["measured"] == "missing" and missing["measured_peak_bytes"] is None
    assert document["summary"]["measured"] == 2 and document["summary"]["largest_abs_difference_bytes"] == FAKE_EXTRA
    # the plain set_row copies u on both: 1 copy predicted, 1 compiled here
    assert rows[("sparse_row:set_row", "plain")]["copies"] == {"predicted": 1, "compiled_on_gpu": 1}

    written = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert written == json.loads(json.dumps(document))
    table = (tmp_path / "out" / "gpu-check.md").read_text()
    assert "- date: 2026-12-03" in table
    line = next(x for x in table.splitlines() if x.startswith("| sparse_row:set_row | donated |"))
    assert line.rstrip().endswith("| 4.00 KiB |"), line
    line = next(x for x in table.splitlines() if x.startswith("| sparse_row:write_kv | plain |"))
    assert "| — | — |" in line, line

    # the same through the command line (no compile: both reports given)
    (tmp_path / "p.json").write_text(json.dumps(predicted))
    (tmp_path / "m.json").write_text(json.dumps(fake))
    code = gpu_check.main(
        [
            "--predicted",
            str(tmp_path / "p.json"),
            "--measured",
            str(tmp_path / "m.json"),
            "--out",
            str(tmp_path / "cli"),
        ]
    )
    assert code == 0 and (tmp_path / "cli" / "gpu-check.md").exists()
