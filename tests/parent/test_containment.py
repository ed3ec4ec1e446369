"""An unexpected exception inside fieldmem while checking one target is that target's error, never a traceback.

A function deep inside fieldmem is monkeypatched to raise a RuntimeError for
one of two targets (``models:cast``), at each stage of a check: the example
arguments, preparing the call, the compile (in a pool thread with ``jobs``
> 1), reading the HLO, the analysis, ``--suggest``, ``--run`` and ``--probe``,
and a chain's steps. The broken target becomes one error result of kind
``internal`` whose one line names the exception and says it is a fieldmem
bug; the other target's result is the one it has without the fault; the
exit code is 2; no traceback is printed. ``FIELDMEM_DEBUG=1`` raises the
exception instead, and KeyboardInterrupt is never contained. In a ``--run``
worker process the fault comes from tests/assets/internal_fault.py, which
patches fieldmem when the worker imports it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import fieldmem
import fieldmem.driver as driver
import fieldmem.driver.lowering as lowering
import fieldmem.findings.analysis as analysis
import fieldmem.findings.runcheck as runcheck
import fieldmem.parent.decide as brain
import fieldmem.xla.hlo as hlo
from fieldmem.frontends.cli import app
from fieldmem.model.errors import FieldmemError
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.checker import check
from fieldmem.request import registry
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import Target

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parents[2]
MODELS = str(ROOT / "tests" / "assets" / "models.py")
TWO = [f"{MODELS}:step", f"{MODELS}:cast"]
STEP = f"{MODELS}:step"  # the name of the first result (its case has no name of its own); the other is models:cast
FORWARD = str(ROOT / "examples" / "forward.py")
FAULT = str(ROOT / "tests" / "assets" / "internal_fault.py")
BOOM = "injected fault"


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError(f"{BOOM}\nwith a second line that must not reach the message")


def _for_cast(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, is_cast: Callable[..., bool]) -> None:
    """``owner.name`` raises for models:cast (as ``is_cast`` tells it from its arguments) and works for the rest."""
    real = getattr(owner, name)

    def patched(*args: Any, **kwargs: Any) -> Any:
        if is_cast(*args, **kwargs):
            _boom()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, patched)


def _named_cast(result: TargetResult, *_: Any, **__: Any) -> bool:
    return result.name == "models:cast"


# stage -> (where to patch, what tells models:cast, the words of the stage in the message, the options)
STAGES: dict[str, tuple[Any, str, Callable[..., bool], str, CheckOptions]] = {
    "arguments": (
        Target,
        "example_arguments",
        lambda self: self.name == "models:cast",
        "making its example arguments",
        CheckOptions(),
    ),
    "prepare": (
        driver,
        "prepare_call",
        lambda function, *a, **k: function.__name__ == "cast",
        "preparing and lowering it",
        CheckOptions(),
    ),
    "compile in a pool": (
        lowering,
        "compile_lowered",
        lambda lowered, *a, **k: "jit_cast" in lowered.as_text()[:300],
        "compiling it",
        CheckOptions(jobs=2),
    ),
    "hlo query": (
        hlo,
        "parse_hlo_module",
        lambda text, *a, **k: text.startswith("HloModule jit_cast"),
        "analysing its compiled program",
        CheckOptions(),
    ),
    "analysis": (
        analysis,
        "analyze_target",
        lambda **k: k["name"] == "models:cast",
        "analysing its compiled program",
        CheckOptions(),
    ),
    "suggest": (
        brain,  # the advisor as the parent calls it (decide imports it at the top)
        "suggest",
        lambda call, *a, **k: call.function_name == "cast",
        "analysing its compiled program",
        CheckOptions(suggest=True),
    ),
    "run": (runcheck, "run_check", _named_cast, "running it", CheckOptions(run=True, isolate=False)),
}


def _one_line_internal(result: TargetResult, stage: str) -> None:
    assert result.status == "error" and result.error is not None
    assert result.error.kind == "internal"
    message = result.error.message
    assert "\n" not in message
    assert message.startswith(f"internal error while {stage}: RuntimeError: {BOOM}")
    assert "a fieldmem bug, please report it (run with FIELDMEM_DEBUG=1 for the traceback)" in message


def _by_name(report: Report) -> dict[str, TargetResult]:
    return {r.name: r for r in report.results}


def _checked_once(specs: list[str], options: CheckOptions = CheckOptions()) -> Report:
    """``check(specs)`` for a module-scoped fixture, leaving no user module, ``sys.path`` entry or case behind
    (the per-test cleanup in conftest.py runs after a module fixture is made, so it would keep them)."""
    path, modules, cases = list(sys.path), set(sys.modules), dict(registry._REGISTRY)
    try:
        return check(specs, options=options)
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if where.startswith((str(ROOT / "tests" / "assets"), str(ROOT / "examples"))):
                del sys.modules[name]
        registry._REGISTRY.clear()
        registry._REGISTRY.update(cases)


@pytest.fixture(scope="module")
def unbroken() -> Report:
    """The two targets checked without any fault."""
    return _checked_once(TWO, CheckOptions(run=True, isolate=False, suggest=True))


@pytest.mark.parametrize("stage", list(STAGES))
def test_an_exception_in_any_stage_is_that_targets_error(
    stage: str, monkeypatch: pytest.MonkeyPatch, unbroken: Report
) -> None:
    owner, name, is_cast, words, options = STAGES[stage]
    _for_cast(monkeypatch, owner, name, is_cast)
    report = check(TWO, options=options)
    results = _by_name(report)
    assert list(results) == [STEP, "models:cast"]
    _one_line_internal(results["models:cast"], words)
    step, before = results[STEP], _by_name(unbroken)[STEP]
    assert step.status == "ok", step.error
    assert step.verdict is not None and before.verdict is not None
    assert step.verdict.in_place == before.verdict.in_place
    assert step.variants["donated"].aliases == before.variants["donated"].aliases
    # the unbroken run ran (XLA's default code generation); a static stage's check compiled at -O0
    assert _less_code_size(step.variants["donated"].memory) == _less_code_size(before.variants["donated"].memory)
    assert report.exit_code == 2


def _less_code_size(memory: MemoryFigures) -> MemoryFigures:
    """``memory`` without the one figure the code generation level changes."""
    return dataclasses.replace(memory, generated_code_bytes=None, unavailable={})


def test_an_exception_in_the_probe_is_that_targets_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _for_cast(monkeypatch, brain, "probe_candidates", _named_cast)  # as decide calls it
    report = check(TWO, options=CheckOptions(run=True, probe=True, isolate=False))
    results = _by_name(report)
    _one_line_internal(results["models:cast"], "running it")
    assert results[STEP].status == "ok"
    assert results[STEP].variants["donated"].run.confirmed
    assert report.exit_code == 2


def test_the_cli_prints_one_line_and_the_other_result(monkeypatch: pytest.MonkeyPatch) -> None:
    _for_cast(monkeypatch, analysis, "analyze_target", lambda **k: k["name"] == "models:cast")
    result = CliRunner().invoke(app, ["check", *TWO, "-f", "json", "--no-isolate"])  # the patch is in this process
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("fieldmem: error: "), result.stderr
    assert "internal error while analysing its compiled program: RuntimeError: injected fault" in errors[0]
    document = json.loads(result.stdout)
    by_name = {r["name"]: r for r in document["results"]}
    assert by_name["models:cast"]["error"]["kind"] == "internal"
    assert by_name[STEP]["status"] == "ok" and by_name[STEP]["verdict"]["in_place"]


def test_the_api_raises_the_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax.numpy as jnp

    def cast(u):
        return u.astype(jnp.bfloat16)

    _for_cast(monkeypatch, driver, "prepare_call", lambda function, *a, **k: function.__name__ == "cast")
    with pytest.raises(FieldmemError) as caught:
        fieldmem.check_function(cast, jnp.ones((8, 8)))
    assert caught.value.kind == "internal"
    assert "internal error while preparing and lowering it: RuntimeError: injected fault" in str(caught.value)
    assert not isinstance(caught.value.__cause__, RuntimeError)


def _chain_results(report: Report) -> dict[str, TargetResult]:
    return {r.name: r for r in report.results}


@pytest.fixture(scope="module")
def whole() -> Report:
    """examples/forward.py (the chain create_field, update1, update2 and forward:jit) without any fault."""
    return _checked_once([FORWARD])


def test_an_exception_in_a_chain_step_is_that_steps_error(monkeypatch: pytest.MonkeyPatch, whole: Report) -> None:
    (chain,) = whole.chains
    _for_cast(monkeypatch, analysis, "analyze_target", lambda **k: k["name"].endswith(":update1]"))
    report = check([FORWARD])
    results = _chain_results(report)
    broken = next(r for name, r in results.items() if name.endswith(":update1]"))
    _one_line_internal(broken, "analysing its compiled program")
    # the step before it and the fused chain are as without the fault; the step after has nothing to start from
    for name, result in _chain_results(whole).items():
        if name.endswith((":create_field]", "[fused]")):
            assert results[name].status == "ok"
            assert results[name].variants["donated"].memory == result.variants["donated"].memory
    (faulty,) = report.chains
    assert [s.status for s in faulty.steps] == [chain.steps[0].status, "error", "not-checked"]
    assert "error" not in [s.status for s in chain.steps]
    assert report.exit_code == 2


def test_an_exception_handing_outputs_to_the_next_step_is_that_steps_error(
    monkeypatch: pytest.MonkeyPatch, whole: Report
) -> None:
    real = driver.spread
    calls = {"n": 0}

    def spread(previous: Any, function: Any) -> Any:
        calls["n"] += 1
        if function.__name__ == "update2":
            _boom()
        return real(previous, function)

    monkeypatch.setattr(driver, "spread", spread)
    report = check([FORWARD])
    results = _chain_results(report)
    broken = next(r for name, r in results.items() if name.endswith(":update2]"))
    _one_line_internal(broken, "passing the previous step's outputs to it")
    assert calls["n"] == 2
    (faulty,) = report.chains
    (chain,) = whole.chains
    assert [s.status for s in faulty.steps] == [chain.steps[0].status, chain.steps[1].status, "error"]


def test_an_exception_in_the_chains_own_analysis_is_the_chains_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(brain, "analyze_chain", _boom)
    report = check([FORWARD, f"{MODELS}:step"])
    results = _by_name(report)
    assert list(results) == ["forward:chain", "forward:jit", STEP]
    _one_line_internal(results["forward:chain"], "checking it")
    assert results["forward:jit"].status == "ok" and results[STEP].status == "ok"
    assert report.chains == () and report.exit_code == 2


def test_fieldmem_debug_raises_the_exception_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    _for_cast(monkeypatch, analysis, "analyze_target", lambda **k: k["name"] == "models:cast")
    monkeypatch.setenv("FIELDMEM_DEBUG", "1")
    with pytest.raises(RuntimeError, match=BOOM):
        check(TWO)
    monkeypatch.setenv("FIELDMEM_DEBUG", "0")  # "0" is off
    assert check(TWO).exit_code == 2


def test_keyboard_interrupt_is_never_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(**_: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "analyze_target", interrupted)
    with pytest.raises(KeyboardInterrupt):
        check(TWO)
    result = CliRunner().invoke(app, ["check", *TWO, "--no-isolate"])  # the patch is in this process
    assert result.exit_code != 0 and "internal error" not in result.output


@pytest.mark.parametrize("extra", [[], ["--suggest"], ["--probe"]], ids=["run", "run-suggest", "run-probe"])
def test_a_fault_in_the_run_worker_is_that_targets_error(extra: list[str]) -> None:
    """``--run`` in a worker process: the fault (patched by the module the worker imports) is the target's error
    and the worker goes on with the next target; where the parent still has questions about the target
    (``--suggest``, ``--probe``), the worker answers them until it is released, and nothing waits forever."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("FIELDMEM_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", FAULT, "--run", "-f", "json", *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("fieldmem: error: "), done.stderr
    assert "internal error while running it: RuntimeError: injected fault while reading the run" in errors[0]
    by_name = {r["name"]: r for r in json.loads(done.stdout)["results"]}
    assert by_name["internal:broken"]["error"]["kind"] == "internal"
    fine = by_name["internal:fine"]
    assert fine["status"] == "ok"
    assert all(a["confirmed"] for a in fine["variants"]["donated"]["run"]["aliases"])


def test_the_error_result_keeps_the_targets_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    _for_cast(monkeypatch, analysis, "analyze_target", lambda **k: k["name"] == "models:cast")
    cast = _by_name(check(TWO))["models:cast"]
    assert cast.definition is not None
    assert cast.definition.endswith(f"models.py:{_line(MODELS, 'def cast(u):')}")


def _line(path: str, text: str) -> int:
    return next(n for n, line in enumerate(Path(path).read_text().splitlines(), start=1) if text in line)


@pytest.mark.parametrize("where", ["check", "send"])
def test_the_worker_writes_an_internal_error_and_goes_on(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's own steps, in this process: a fault compiling one target, or sending its readings, is that
    target's error result, sent in its place; the next target is served and its readings sent."""
    import io
    import queue

    from fieldmem.parent import isolate
    from fieldmem.parent.supervisor import Supervisor
    from fieldmem.worker import main as worker
    from fieldmem.worker.local_readers import LocalHands
    from fieldmem.worker.protocol import decode_value, read_event

    supervisor = Supervisor([isolate.Unit(spec) for spec in TWO], [None], CheckOptions(run=True), False, None)
    request = json.loads(json.dumps(supervisor.request(supervisor.todo())))
    if where == "check":
        _for_cast(monkeypatch, LocalHands, "variants", lambda self, job: job.target.name == "models:cast")
        stage = "compiling it"
    else:
        real = worker._Worker.emit

        def emit(self: Any, what: str, key: Any, *args: Any, **kwargs: Any) -> None:
            if what == "variants" and key["name"] == "models:cast":
                _boom()
            real(self, what, key, *args, **kwargs)

        monkeypatch.setattr(worker._Worker, "emit", emit)
        stage = "sending its readings"
    channel = io.StringIO()
    assert worker._Worker(request, channel, queue.Queue()).run() == "end"
    events = [read_event(line.encode()) for line in channel.getvalue().splitlines()]
    assert [(e["e"], e.get("name")) for e in events if e["e"] in ("start", "done")] == [
        ("start", STEP),
        ("done", STEP),
        ("start", "models:cast"),
        ("done", "models:cast"),
    ]
    kinds = {name: [e["e"] for e in events if e.get("name") == name] for name in (STEP, "models:cast")}
    assert kinds[STEP] == ["start", "plain", "variants", "run", "done"]
    assert kinds["models:cast"] == ["start", "plain", "error", "done"]
    (ended,) = [e for e in events if e["e"] == "error"]
    cast = decode_value(TargetResult, ended["result"])
    assert cast.name == "models:cast"
    _one_line_internal(cast, stage)
