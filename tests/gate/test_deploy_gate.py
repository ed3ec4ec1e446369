"""A CI gate about the hardware users ship to (issue 48), on the steps of ``tests/assets/deploy_steps.py``.

On a CPU runner, ``--expect in-place`` asks whether the user's code does everything it can: a copy XLA:CPU
keeps by its own choice (a flax + optax AdamW step's kernel, a KV cache written through a temporary) is a
warning that names how to check the hardware the user trains on, never an error; a state argument left out
of ``donate_argnums`` still fails. Deploy backends named in ``[tool.fieldmem]`` are judged by a bare
``fieldmem check``, whose every output says so.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import schema_violations
from helpers_backends import require_extra
from typer.testing import CliRunner

from fieldmem.frontends.cli import app

pytestmark = pytest.mark.compile

runner = CliRunner()
TRAIN = ("deploy_steps.py:adamw_step", "--args", "deploy_steps:train_args")
DECODE = ("deploy_steps.py:kv_decode", "--args", "deploy_steps:decode_args")


def check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120", "GITHUB_STEP_SUMMARY": ""})


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


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
    # one error for the one change, at the line that makes the jit (its donate_argnums), which it names first
    jit = _line_of(in_assets / "deploy_steps.py", f"{target} = jax.jit(")
    assert len(errors) == 1 and errors[0].startswith(f"::error file=deploy_steps.py,line={jit},"), errors
    assert errors[0].split("::", 2)[2].startswith(f"at deploy_steps.py:{jit}, where the jit sets its donation: ")
    assert fix in errors[0] and "expect-in-place failed" in errors[0], errors


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


SCAN = """\
import jax
import jax.numpy as jnp
from flax import struct


class Wave(struct.PyTreeNode):
    u: jax.Array
    v: jax.Array


def make_args():
    return (Wave(jnp.zeros((64, 64)), jnp.zeros((64, 64))),)


def step(w):
    lap = jnp.roll(w.u, 1, 0) + jnp.roll(w.u, -1, 0) - 2 * w.u
    v = w.v + 0.1 * lap
    return w.replace(u=w.u + 0.1 * v, v=v)


def advance(w):
    w, _ = jax.lax.scan(lambda c, _: (step(c), None), w, None, length=4)
    return w


advance_scan = jax.jit(advance, donate_argnums=0)
"""


def test_one_removed_donation_is_one_error_at_the_jit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A baseline records a scan step donating its state; removing the ``donate_argnums`` regresses aliases,
    copies, figures and the verdict: one error, at the jit's line, naming that line first, the rest its
    detail; every annotation's ``line=`` is the first line its message names; the job summary lists all."""
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "pde.py"
    source.write_text(SCAN)
    spec = ("pde.py:advance_scan", "--args", "pde:make_args")
    assert check(*spec, "--save-baseline", "b.json").exit_code == 0
    source.write_text(SCAN.replace("jax.jit(advance, donate_argnums=0)", "jax.jit(advance)"))
    sys.modules.pop("pde", None)
    summary = tmp_path / "summary.md"
    run = runner.invoke(
        app,
        ["check", *spec, "--baseline", "b.json", "-f", "github"],
        env={"COLUMNS": "120", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert run.exit_code == 1, run.output
    errors = annotations(run.stdout, "error")
    jit = _line_of(source, "advance_scan = jax.jit(")
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"::error file=pde.py,line={jit},"), errors
    assert "donation changed" in errors[0] and "alias lost: w.u" in errors[0], errors[0]
    regressions = json_regressions(tmp_path, spec)
    assert len(regressions) > 3  # aliases, copies, figures, the verdict: one change
    for line in annotations(run.stdout, "error") + annotations(run.stdout, "warning"):
        where = re.match(r"::\w+ file=([^,]+),line=(\d+)", line)
        named = re.search(r"\b([\w/.-]+\.py):(\d+)", line.split("::", 2)[2])
        if where and named:
            assert (where.group(1), where.group(2)) == (named.group(1), named.group(2)), line
    text = summary.read_text()
    assert text.count("- ❌ `pde.py:advance_scan`") >= len(regressions), text


def json_regressions(folder: Path, spec: tuple[str, ...]) -> list[dict[str, Any]]:
    result = check(*spec, "--baseline", "b.json", "-f", "json")
    return list(json.loads(result.stdout)["baseline"]["regressions"])


def test_several_reports_on_stdout_are_one_json_document(in_assets: Path, tmp_path: Path) -> None:
    """``fieldmem check a.py --backend cpu,tpu:v5e -f json | python -c "import json,sys; json.load(sys.stdin)"``:
    one ``fieldmem.reports/1`` document, in the shipped schema, that ``fieldmem compare`` reads too."""
    require_extra("tpu")
    result = check(*DECODE, "--backend", "cpu,tpu:v5e", "-f", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema"] == "fieldmem.reports/1", list(document)
    assert [r["backend"] for r in document["reports"]] == ["cpu", "tpu:v5e"]
    assert schema_violations(document) == []
    saved = tmp_path / "both.json"
    saved.write_text(result.stdout)
    compared = runner.invoke(app, ["compare", str(saved)], env={"COLUMNS": "120"})
    assert compared.exit_code == 0, compared.output
    assert "both.json (cpu)" in compared.stdout and "both.json (tpu:v5e)" in compared.stdout


def test_a_report_names_the_libraries_its_worker_imported(in_assets: Path) -> None:
    """Library versions are what the worker imported (issue 48): a CPU report of a step that imports flax and
    optax names their installed releases in its JSON and its header; one that imports neither names none."""
    from importlib import metadata

    document = json.loads(check(*DECODE, "-f", "json").stdout)
    assert document["library_versions"] == {"flax": metadata.version("flax"), "optax": metadata.version("optax")}
    header = check(*DECODE).stdout.splitlines()[0]
    assert f"(flax {metadata.version('flax')}, optax {metadata.version('optax')})" in header, header
    bare = json.loads(check("models:step", "-f", "json").stdout)
    assert bare["library_versions"] == {}, bare["library_versions"]
