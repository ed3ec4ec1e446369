"""A CI gate about the hardware users ship to (issue 48), on the steps of ``tests/assets/deploy_steps.py``.

On a CPU runner, ``--expect in-place`` asks whether the user's code does everything it can: a copy XLA:CPU
keeps by its own choice (a flax + optax AdamW step's kernel, a KV cache written through a temporary) is a
warning that names how to check the hardware the user trains on, never an error; a state argument left out
of ``donate_argnums`` still fails. Deploy backends named in ``[tool.fieldmem]`` are judged by a bare
``fieldmem check``, whose every output says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.cli import app

pytestmark = pytest.mark.compile

runner = CliRunner()
TRAIN = ("deploy_steps.py:adamw_step", "--args", "deploy_steps:train_args")
DECODE = ("deploy_steps.py:kv_decode", "--args", "deploy_steps:decode_args")


def check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120", "GITHUB_STEP_SUMMARY": ""})


def annotations(text: str, level: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith((f"::{level} ", f"::{level}::"))]


def test_cpu_artefacts_do_not_fail_the_gate(in_assets: Path) -> None:
    """A flax + optax AdamW step and a KV decode on XLA:CPU: in place as written, exit 0, the compiler's
    copies shown as warnings that name the compiler and how to check the hardware the user trains on."""
    result = check(*TRAIN, *DECODE, "--expect", "in-place", "-f", "github")
    assert result.exit_code == 0, result.output
    assert not annotations(result.stdout, "error"), result.stdout
    warnings = annotations(result.stdout, "warning")
    chosen = [line for line in warnings if "compiler-copy" in line]
    assert {"adamw_step", "kv_decode"} == {
        name for name in ("adamw_step", "kv_decode") for line in chosen if f"%3A{name}%3A" in line
    }, warnings
    for line in chosen:
        assert "XLA:CPU still" in line and "the compiler's choice" in line, line
        assert "--backend tpu:v5e" in line and "[tool.fieldmem] backends" in line, line
    assert "2 in place as written" in result.stdout, result.stdout


def test_the_verdict_says_in_place_as_written(in_assets: Path) -> None:
    result = check(*TRAIN, *DECODE, "--expect", "in-place", "-f", "json")
    assert result.exit_code == 0, result.output
    for entry in json.loads(result.stdout)["results"]:
        verdict = entry["verdict"]
        assert verdict["kind"] == "in-place-as-written" and verdict["in_place"], verdict
        assert verdict["summary"].startswith("in place as written; XLA:CPU still "), verdict["summary"]
        assert {f["severity"] for f in verdict["findings"] if f["code"] == "compiler-copy"} == {"warning"}
        assert not [f for f in verdict["findings"] if f["severity"] == "error"], verdict["findings"]
        (expect,) = [c for c in entry["checks"] if c["name"] == "expect-in-place"]
        assert expect["passed"] and "as written" in expect["message"], expect


@pytest.mark.parametrize(
    ("target", "args", "fix"),
    [
        ("adamw_step_forgets_opt_state", "deploy_steps:train_args", "donate opt_state"),
        ("kv_decode_forgets_v_cache", "deploy_steps:decode_args", "donate v_cache"),
    ],
)
def test_a_state_argument_left_undonated_still_fails(in_assets: Path, target: str, args: str, fix: str) -> None:
    result = check(f"deploy_steps.py:{target}", "--args", args, "--expect", "in-place", "-f", "github")
    assert result.exit_code == 1, result.output
    errors = annotations(result.stdout, "error")
    assert errors and all(fix in line for line in errors), errors


def test_deploy_backends_in_the_config_are_judged_and_said(
    tmp_path: Path, in_assets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[tool.fieldmem] backends`` names the backends a bare ``fieldmem check`` judges: the table's header,
    the JSON and the GitHub summary say so; a one-off ``--backend`` is the header's own backend."""
    shutil.copy(in_assets / "deploy_steps.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "pyproject.toml"
    config.write_text(
        '[tool.fieldmem]\ntargets = ["deploy_steps.py:kv_decode"]\nargs = "deploy_steps:decode_args"\n'
        'backends = ["cpu"]\nexpect = "in-place"\n'
    )
    table = check("--config", str(config))
    assert table.exit_code == 0, table.output
    assert "judged on cpu, the deploy backend [tool.fieldmem] names" in table.stdout.splitlines()[1], table.stdout
    document = json.loads(check("--config", str(config), "-f", "json").stdout)
    assert document["judged_backends"] == ["cpu"] and document["judged_by"] == "[tool.fieldmem] backends"
    github = check("--config", str(config), "-f", "github").stdout
    assert "judged on cpu, the deploy backend [tool.fieldmem] names" in annotations(github, "notice")[-1]
    once = check(*DECODE, "--backend", "cpu")
    assert "judged on" not in once.stdout, once.stdout
