"""The pytest plugin, driven through whole pytest runs in fresh ``pytester`` projects.

The projects have nothing but fieldmem installed: the plugin comes in through
its ``pytest11`` entry point. Runs that compile go through
``runpytest_subprocess`` (jax lives in its own process) and are few, each
carrying several tests: the fixture and marker (run 1), every size option on
the command line and then as its ini twin, each on both sides of its limit
(runs 2 and 3), and a session that never checks anything (run 4: no jax
imported, and a report that cannot be written fails the run). Usage errors
stop pytest before any test runs, so those run in process.

The update's live peak and footprint are 16 KiB + 4 B on a 64x64 f32 array
and 32 KiB + 4 B on 64x128: a 24 KiB limit lies between the two.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

UPDATES = textwrap.dedent(
    """\
    import jax.numpy as jnp


    def update(u, f):
        return u.at[0].add(f)


    def with_extra(u, g):
        return u.at[0].add(1.0), g * 2.0


    SMALL = jnp.zeros((64, 64), jnp.float32)
    GRADS = jnp.ones((64, 64), jnp.float32)  # another array: SMALL given twice, one of them donated, jax refuses
    LARGE = jnp.zeros((64, 128), jnp.float32)
    """
)
UPDATE_LINE = next(n for n, line in enumerate(UPDATES.splitlines(), 1) if "u.at[0].add(f)" in line)

BASICS = textwrap.dedent(
    """\
    import pytest

    import fieldmem
    from updates import GRADS, LARGE, SMALL, update, with_extra


    def test_in_place(fieldmem_check):
        report = fieldmem_check(update, SMALL, 1.0)
        assert report.results[0].verdict.in_place


    def test_not_in_place(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none")


    @pytest.mark.fieldmem(max_live_peak="24KiB")
    def test_marker_within(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0)


    @pytest.mark.fieldmem(max_live_peak="24KiB")
    def test_marker_over(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0)


    @pytest.mark.fieldmem(in_place=False, max_peak="48KiB")
    def test_marker_budget_only(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none")


    @pytest.mark.fieldmem(max_live_peak="24KiB")
    def test_call_overrides_marker(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0, max_live_peak=None)


    def test_api_without_the_plugin():
        fieldmem.assert_in_place(update, SMALL, 1.0, donate="none")


    def test_not_declared_new(fieldmem_check):
        fieldmem_check(with_extra, SMALL, GRADS, donate="u")


    def test_declared_new(fieldmem_check):
        report = fieldmem_check(with_extra, SMALL, GRADS, donate="u", new="out[1]")
        [finding] = [f for f in report.results[0].verdict.findings if f.code == "new-output"]
        assert "declared new" in finding.message


    @pytest.mark.fieldmem(new=["out[1]"])
    def test_marker_declared_new(fieldmem_check):
        fieldmem_check(with_extra, SMALL, GRADS, donate="u")


    @pytest.mark.fieldmem(max_live_peak="24KiB")
    def test_marked_without_fixture():
        pass


    @pytest.mark.fieldmem(max_live_peek="24KiB")
    def test_marker_typo(fieldmem_check):
        pass


    @pytest.mark.fieldmem(max_peak="lots")
    def test_marker_bad_size(fieldmem_check):
        pass
    """
)

MODULE_MARKER = textwrap.dedent(
    """\
    import pytest

    from updates import LARGE, update

    pytestmark = pytest.mark.fieldmem(max_live_peak="24KiB")


    def test_module_marker_over(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0)


    def test_unchecked_helper():
        assert True
    """
)

# every size option at 24 KiB; each test switches off the budgets it is not about
OPTIONS = textwrap.dedent(
    """\
    from updates import LARGE, SMALL, update


    def test_peak_within(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, max_live_peak=None)


    def test_peak_over(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0, max_live_peak=None)


    def test_live_within(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, max_peak=None)


    def test_live_over(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0, max_peak=None)


    def test_min_bytes_below(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none", max_peak=None, max_live_peak=None)


    def test_min_bytes_above(fieldmem_check):
        fieldmem_check(update, LARGE, 1.0, donate="none", max_peak=None, max_live_peak=None)
    """
)

_OUTCOME = re.compile(r"^(\S+\.py::\S+) (PASSED|FAILED|ERROR)\b", re.MULTILINE)


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """``{test name: PASSED|FAILED|ERROR}`` from a ``-v`` run's output."""
    found: dict[str, str] = {}
    for nodeid, outcome in _OUTCOME.findall(result.stdout.str()):
        name = nodeid.split("::")[-1]
        # a test failing at setup is reported ERROR; keep the worst
        if found.get(name) != "ERROR":
            found[name] = outcome
    return found


def section(result: pytest.RunResult, test: str) -> str:
    """The failure or error section pytest printed for ``test``."""
    text = result.stdout.str()
    match = re.search(rf"^_+ (?:ERROR at setup of )?{re.escape(test)} _+$", text, re.MULTILINE)
    assert match, f"no section for {test}:\n{text}"
    rest = text[match.end() :]
    end = re.search(r"^(?:_{3,} |={3,} )", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


_RUNS: dict[str, tuple[pytest.RunResult, Path]] = {}


@pytest.fixture
def basics_run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, Path]:
    """Run 1 (fixture, marker, API, --fieldmem-report), made once and read by several tests.

    ``pytester`` is function-scoped, so the first test that needs the run
    makes it in its own project folder; pytest keeps that folder for the
    session, and the later tests read the same result and report.
    """
    if "basics" not in _RUNS:
        pytester.makepyfile(updates=UPDATES, test_basics=BASICS, test_module_marker=MODULE_MARKER)
        pytester.mkdir("out")
        result = pytester.runpytest_subprocess("-v", "--strict-markers", "--fieldmem-report=out/report.json")
        _RUNS["basics"] = (result, pytester.path)
    return _RUNS["basics"]


# ----------------------------------------------------------------------------
# Run 1: fixture, marker, API


@pytest.mark.compile
def test_fixture_and_marker_outcomes(basics_run: tuple[pytest.RunResult, Path]) -> None:
    result, _ = basics_run
    assert outcomes(result) == {
        "test_in_place": "PASSED",
        "test_not_in_place": "FAILED",
        "test_marker_within": "PASSED",
        "test_marker_over": "FAILED",
        "test_marker_budget_only": "PASSED",
        "test_call_overrides_marker": "PASSED",
        "test_api_without_the_plugin": "FAILED",
        "test_not_declared_new": "FAILED",
        "test_declared_new": "PASSED",
        "test_marker_declared_new": "PASSED",
        "test_marked_without_fixture": "ERROR",
        "test_marker_typo": "ERROR",
        "test_marker_bad_size": "ERROR",
        "test_module_marker_over": "FAILED",
        "test_unchecked_helper": "PASSED",
    }, result.stdout.str()
    # --strict-markers: the fieldmem marker is registered, the run is not a usage error
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.compile
def test_failure_shows_the_cli_verdict_and_source_line(basics_run: tuple[pytest.RunResult, Path]) -> None:
    result, _ = basics_run
    for test in ("test_not_in_place", "test_api_without_the_plugin"):
        text = section(result, test)
        assert "E       fieldmem.NotInPlaceError: updates:update: not in place" in text, text
        assert f"u is not donated and is copied (16.0 KiB) at updates.py:{UPDATE_LINE}: donate it" in text
        assert "✗ expect-in-place" in text
        # the test's own line is shown, fieldmem's internals are not
        assert ">       fieldmem" in text
        assert "pytest_plugin.py" not in text and "fieldmem/frontends/api.py" not in text and "checker.py" not in text


@pytest.mark.compile
def test_budget_failures_name_the_budget(basics_run: tuple[pytest.RunResult, Path]) -> None:
    result, _ = basics_run
    for test in ("test_marker_over", "test_module_marker_over"):
        text = section(result, test)
        assert (
            "fieldmem.NotInPlaceError: updates:update: max-live-peak: "
            "donated live peak 32.0 KiB exceeds the budget 24.0 KiB"
        ) in text, text
        assert "✓ expect-in-place" in text


@pytest.mark.compile
def test_marker_mistakes_are_setup_errors(basics_run: tuple[pytest.RunResult, Path]) -> None:
    result, _ = basics_run
    typo = section(result, "test_marker_typo")
    assert (
        "fieldmem: error: @pytest.mark.fieldmem has no 'max_live_peek': use in_place, max_footprint, max_live_peak"
    ) in typo
    assert "During handling" not in typo and "Traceback" not in typo
    size = section(result, "test_marker_bad_size")
    assert "fieldmem: error: @pytest.mark.fieldmem max_peak='lots' is not understood: write e.g. 64MiB" in size
    unused = section(result, "test_marked_without_fixture")
    assert "is marked @pytest.mark.fieldmem but does not use the fieldmem_check fixture" in unused


@pytest.mark.compile
def test_report_option_writes_every_fixture_check(basics_run: tuple[pytest.RunResult, Path]) -> None:
    result, path = basics_run
    document = json.loads((path / "out" / "report.json").read_text())
    assert document["schema"] == "fieldmem.report/2"
    targets = {r["target"]: r for r in document["results"]}
    assert set(targets) == {
        "test_basics.py::test_in_place::updates:update",
        "test_basics.py::test_not_in_place::updates:update",
        "test_basics.py::test_marker_within::updates:update",
        "test_basics.py::test_marker_over::updates:update",
        "test_basics.py::test_marker_budget_only::updates:update",
        "test_basics.py::test_call_overrides_marker::updates:update",
        "test_basics.py::test_not_declared_new::updates:with_extra",
        "test_basics.py::test_declared_new::updates:with_extra",
        "test_basics.py::test_marker_declared_new::updates:with_extra",
        "test_module_marker.py::test_module_marker_over::updates:update",
    }
    over = targets["test_basics.py::test_marker_over::updates:update"]
    assert [(c["name"], c["passed"]) for c in over["checks"]] == [("expect-in-place", True), ("max-live-peak", False)]
    assert targets["test_basics.py::test_marker_budget_only::updates:update"]["expect"] == "any"
    result.stdout.fnmatch_lines([f"fieldmem: 10 fieldmem check(s) written to {path / 'out' / 'report.json'}"])


# ----------------------------------------------------------------------------
# Runs 2 and 3: every size option on the command line, then as its ini twin


EXPECTED_OPTION_OUTCOMES = {
    "test_peak_within": "PASSED",
    "test_peak_over": "FAILED",
    "test_live_within": "PASSED",
    "test_live_over": "FAILED",
    "test_min_bytes_below": "PASSED",
    "test_min_bytes_above": "FAILED",
}


@pytest.mark.compile
@pytest.mark.parametrize("where", ["command line", "ini"])
def test_each_option_on_both_sides_of_its_limit(pytester: pytest.Pytester, where: str) -> None:
    pytester.makepyfile(updates=UPDATES, test_options=OPTIONS)
    settings = {"max_peak": "24KiB", "max_live_peak": "24KiB", "min_bytes": "24KiB", "report": "options.json"}
    if where == "ini":
        pytester.makeini("[pytest]\n" + "".join(f"fieldmem_{k} = {v}\n" for k, v in settings.items()))
        result = pytester.runpytest_subprocess("-v")
    else:
        flags = [f"--fieldmem-{key.replace('_', '-')}={value}" for key, value in settings.items()]
        result = pytester.runpytest_subprocess("-v", *flags)
    assert outcomes(result) == EXPECTED_OPTION_OUTCOMES, result.stdout.str()
    peak = section(result, "test_peak_over")
    assert "updates:update: max-footprint: donated footprint 32.0 KiB exceeds the budget 24.0 KiB" in peak
    assert "max-live-peak" not in peak
    live = section(result, "test_live_over")
    assert "updates:update: max-live-peak: donated live peak 32.0 KiB exceeds the budget 24.0 KiB" in live
    assert "max-footprint" not in live
    assert "updates:update: not in place" in section(result, "test_min_bytes_above")
    document = json.loads((pytester.path / "options.json").read_text())
    assert document["min_bytes"] == 24 * 1024
    below = next(r for r in document["results"] if "test_min_bytes_below" in r["target"])
    assert below["verdict"]["in_place"] and below["variants"]["donated"]["copies"]


# ----------------------------------------------------------------------------
# Run 4: a session that checks nothing (nothing compiles: not marked compile)


def test_unused_plugin_imports_no_jax_and_a_lost_report_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain=textwrap.dedent(
            """\
            import shutil
            import sys
            from pathlib import Path


            def test_a_plugin_loaded_without_jax():
                assert "fieldmem.pytest_plugin" in sys.modules
                assert "jax" not in sys.modules


            def test_b_remove_the_report_folder():
                shutil.rmtree(Path(__file__).parent / "gone")
            """
        )
    )
    pytester.mkdir("gone")
    result = pytester.runpytest_subprocess("-v", "--fieldmem-report=gone/report.json")
    assert outcomes(result) == {
        "test_a_plugin_loaded_without_jax": "PASSED",
        "test_b_remove_the_report_folder": "PASSED",
    }
    result.stdout.fnmatch_lines(["fieldmem: error: cannot write '*gone/report.json': No such file or directory"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# ----------------------------------------------------------------------------
# In process: nothing here compiles or imports jax


def test_marker_and_options_are_registered(pytester: pytest.Pytester) -> None:
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.fieldmem(in_place=True, max_footprint=None, max_live_peak=None, *"])
    help_text = pytester.runpytest("--help").stdout.str()
    for flag, ini in [
        ("--fieldmem-max-footprint=SIZE", "fieldmem_max_footprint"),
        ("--fieldmem-max-peak=SIZE", "fieldmem_max_peak"),  # the footprint budget's older name, still taken
        ("--fieldmem-max-live-peak=SIZE", "fieldmem_max_live_peak"),
        ("--fieldmem-min-bytes=SIZE", "fieldmem_min_bytes"),
        ("--fieldmem-report=PATH", "fieldmem_report"),
        ("--fieldmem-baseline=PATH", "fieldmem_baseline"),
        ("--fieldmem-tolerance=TOLERANCE", "fieldmem_tolerance"),
    ]:
        assert flag in help_text and f"{ini} (string)" in help_text
    assert "--fieldmem-compare-fail" in help_text and "fieldmem_compare_fail (bool)" in help_text
    assert "--fieldmem-save-baseline=PATH" in help_text


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        pytest.param("max-footprint", "lots", "'lots' is not understood: write e.g. 64MiB", id="max-footprint"),
        pytest.param(
            "max-live-peak", "-1MiB", "'-1MiB' is not understood (a size is 0 or more bytes)", id="max-live-peak"
        ),
        pytest.param("min-bytes", "1 parsec", "'1 parsec' is not understood", id="min-bytes"),
        pytest.param(
            "report", "missing/report.json", "'missing/report.json': the folder '*missing' does not exist", id="report"
        ),
    ],
)
@pytest.mark.parametrize("where", ["command line", "ini"])
def test_bad_option_values_are_usage_errors(
    pytester: pytest.Pytester, option: str, value: str, message: str, where: str
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    if where == "ini":
        ini = f"fieldmem_{option.replace('-', '_')}"
        pytester.makeini(f"[pytest]\n{ini} = {value}\n")
        result = pytester.runpytest()
        label = f"ini {ini}"
    else:
        result = pytester.runpytest(f"--fieldmem-{option}={value}")
        label = f"--fieldmem-{option}"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: fieldmem: error: {label} {message}*"])


def test_report_option_must_name_a_file(pytester: pytest.Pytester) -> None:
    pytester.mkdir("reports")
    result = pytester.runpytest("--fieldmem-report=reports")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: fieldmem: error: --fieldmem-report 'reports' is a folder: name a file, *"])


@pytest.mark.parametrize(
    ("flags", "pyproject", "message"),
    [
        pytest.param(
            ["--fieldmem-compare-fail"],
            None,
            "--fieldmem-compare-fail needs a baseline: give --fieldmem-baseline*",
            id="compare-fail-alone",
        ),
        pytest.param(
            ["--fieldmem-baseline=gone.json"],
            None,
            "--fieldmem-baseline 'gone.json' does not exist: save one with --fieldmem-save-baseline gone.json*",
            id="missing-baseline",
        ),
        pytest.param(
            ["--fieldmem-compare-fail"],
            '[tool.fieldmem]\nbaseline = "gone.json"\n',
            "[[]tool.fieldmem[]] baseline 'gone.json' does not exist*",
            id="config-baseline-missing",
        ),
        pytest.param(["--fieldmem-tolerance=lots"], None, "*lots*", id="tolerance"),
        pytest.param(
            [], '[tool.fieldmem]\nmax-peak = "lots"\n', "*pyproject.toml: [[]tool.fieldmem[]] max-peak*", id="config"
        ),
    ],
)
def test_bad_baseline_options_and_config_are_usage_errors(
    pytester: pytest.Pytester, flags: list[str], pyproject: str | None, message: str
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    if pyproject is not None:
        pytester.makefile(".toml", pyproject=pyproject)
    result = pytester.runpytest(*flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stderr.str()
    result.stderr.fnmatch_lines([f"ERROR: fieldmem: error: {message}"])


def test_ini_report_path_is_relative_to_the_ini_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nfieldmem_report = missing/report.json\n")
    monkeypatch.chdir(pytester.mkdir("sub"))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    folder = pytester.path / "missing"
    result.stderr.fnmatch_lines(
        [f"ERROR: fieldmem: error: ini fieldmem_report 'missing/report.json': the folder '{folder}' does not exist"]
    )
    # on the command line, the same path is relative to where pytest runs
    result = pytester.runpytest("--fieldmem-report=missing/report.json")
    result.stderr.fnmatch_lines([f"*the folder '{pytester.path / 'sub' / 'missing'}' does not exist"])


CHAINS = textwrap.dedent(
    """\
    import jax.numpy as jnp


    def scale(u):
        return u * 0.5


    def shift(u):
        return u + 1.0


    def to_half(u):
        return u.astype(jnp.bfloat16)


    def test_chain_in_place(fieldmem_check):
        report = fieldmem_check.chain([scale, shift, scale], jnp.zeros((64, 64)))
        assert report.chains[0].in_place


    def test_chain_breaks(fieldmem_check):
        fieldmem_check.chain([scale, to_half, shift], jnp.zeros((64, 64)))
    """
)
HALF_LINE = next(n for n, line in enumerate(CHAINS.splitlines(), 1) if "astype(jnp.bfloat16)" in line)


@pytest.mark.compile
def test_the_fixture_checks_chains_and_names_the_breaking_step(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_chains=CHAINS)
    pytester.mkdir("out")
    result = pytester.runpytest_subprocess("-v", "--fieldmem-report=out/report.json")
    assert outcomes(result) == {"test_chain_in_place": "PASSED", "test_chain_breaks": "FAILED"}, result.stdout.str()
    text = section(result, "test_chain_breaks")
    assert "NotInPlaceError: chain test_chains:scale,to_half,shift: breaks in place at step 2 of 3 (to_half)" in text
    assert f"test_chains.py:{HALF_LINE}" in text
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert [c["name"] for c in report["chains"]] == ["test_chains:scale,shift,scale", "test_chains:scale,to_half,shift"]


# ----------------------------------------------------------------------------
# Run 5: the supervised worker (issue 29, item 2): a crash, an os._exit or a hang while traced fails its
# test, never the session; the report is written whatever happens

HOSTILE = textwrap.dedent(
    """\
    import os
    import time

    import jax.numpy as jnp
    import pytest

    from updates import SMALL, update

    CONSTANT = jnp.ones((64, 64))


    def exits(u, f):
        os._exit(0)


    def hangs(u, f):
        time.sleep(60)
        return u


    def test_a_failure_first(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none")


    def test_exits_while_traced(fieldmem_check):
        fieldmem_check(exits, SMALL, 1.0)


    def test_checked_after_the_death(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0)


    def test_hangs_while_traced(fieldmem_check):
        fieldmem_check(hangs, SMALL, 1.0)


    def test_a_local_function_is_supervised(fieldmem_check):
        def local(u, f):
            os._exit(3)

        fieldmem_check(local, SMALL, 1.0)


    def test_a_closure_over_an_array_is_supervised(fieldmem_check):
        def scaled(u, f):
            return u.at[0].add(f * CONSTANT[0, 0] + LOCAL[0])

        LOCAL = jnp.ones((4,))
        report = fieldmem_check(scaled, SMALL, 1.0)
        assert report.results[0].verdict.in_place


    class Unpicklable:
        def __reduce__(self):
            raise TypeError("this object stays here")


    def takes_a_setting(u, f, setting):
        return u.at[0].add(f)


    def test_what_cannot_be_sent_is_checked_here(fieldmem_check):
        fieldmem_check(takes_a_setting, SMALL, 1.0, Unpicklable(), static="setting")
    """
)


@pytest.mark.compile
def test_a_target_ending_its_process_or_hanging_fails_its_test_not_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(updates=UPDATES, test_hostile=HOSTILE)
    result = pytester.runpytest_subprocess(
        "-v", "--fieldmem-report=report.json", "--fieldmem-timeout=5", "-W", "always"
    )
    assert outcomes(result) == {
        "test_a_failure_first": "FAILED",
        "test_exits_while_traced": "FAILED",
        "test_checked_after_the_death": "PASSED",
        "test_hangs_while_traced": "FAILED",
        "test_a_local_function_is_supervised": "FAILED",
        "test_a_closure_over_an_array_is_supervised": "PASSED",
        "test_what_cannot_be_sent_is_checked_here": "PASSED",
    }, result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    assert "fieldmem: error: test_hostile:exits: its worker process exited with status 0 while checking it" in text
    assert "did not finish within --fieldmem-timeout 5 s" in text
    assert "exited with status 3" in section(result, "test_a_local_function_is_supervised")
    assert "test_hostile:takes_a_setting was checked in pytest's own process, not the supervised worker" in text
    assert "this object stays here" in text
    report = json.loads((pytester.path / "report.json").read_text())
    statuses = {r["name"]: r["status"] for r in report["results"]}
    assert statuses["test_hostile:exits"] == "error" and statuses["test_hostile:hangs"] == "error"
    assert len(report["results"]) == 7


def test_the_isolation_options_are_parsed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    for flag in ("--fieldmem-isolate=maybe", "--fieldmem-timeout=soon", "--fieldmem-timeout=-1"):
        result = pytester.runpytest(flag)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, flag
        assert "fieldmem: error: --fieldmem-" in result.stderr.str()
    assert pytester.runpytest("--fieldmem-isolate=no", "--fieldmem-timeout=0").ret == pytest.ExitCode.OK


# ----------------------------------------------------------------------------
# The supervised worker gets arrays as their shapes, but keeps where they were: a donation jax must move
# first is lost in the plugin as on the command line (issue 28, part 2)

MOVED = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P


    def _rows():
        return NamedSharding(jax.make_mesh((len(jax.devices()),), ("x",)), P("x"))


    def _update(w, g):
        return w - 0.1 * g


    step = jax.jit(_update, in_shardings=(_rows(), _rows()), out_shardings=_rows(), donate_argnums=0)


    def test_arrays_made_on_one_device(fieldmem_check):
        fieldmem_check(step, jnp.ones((64, 64)), jnp.ones((64, 64)))


    def test_arrays_placed_where_the_program_takes_them(fieldmem_check):
        fieldmem_check(step, *(jax.device_put(jnp.ones((64, 64)), _rows()) for _ in range(2)))
    """
)


@pytest.mark.compile
def test_a_donation_lost_to_a_move_fails_in_the_worker_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_moved=MOVED)
    result = pytester.runpytest_subprocess("-v")
    assert outcomes(result) == {
        "test_arrays_made_on_one_device": "FAILED",
        "test_arrays_placed_where_the_program_takes_them": "PASSED",
    }, result.stdout.str()
    assert "jax.device_put" in section(result, "test_arrays_made_on_one_device")


X64 = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp


    def update(u):
        return u.at[0].set(1.0)


    def test_x64_as_the_test_has_it(fieldmem_check):
        jax.config.update("jax_enable_x64", True)
        try:
            report = fieldmem_check(update, jnp.zeros((64, 64), jnp.float64))
        finally:
            jax.config.update("jax_enable_x64", False)
        assert report.results[0].inputs[0].dtype == "float64", report.results[0].inputs[0]


    def test_and_back_to_float32(fieldmem_check):
        report = fieldmem_check(update, jnp.zeros((64, 64), jnp.float64))
        assert report.results[0].inputs[0].dtype == "float32", report.results[0].inputs[0]
    """
)


@pytest.mark.compile
def test_the_worker_traces_with_the_tests_jax_settings(pytester: pytest.Pytester) -> None:
    """jax_enable_x64 set by the test reached only pytest's jax: the worker checked a float32 program."""
    pytester.makepyfile(test_x64=X64)
    result = pytester.runpytest_subprocess("-v")
    assert outcomes(result) == {"test_x64_as_the_test_has_it": "PASSED", "test_and_back_to_float32": "PASSED"}, (
        result.stdout.str()
    )


# ----------------------------------------------------------------------------
# Run 8: one baseline for the CLI and the plugin, under pytest-xdist (issue 30, item 3)

SHARED = textwrap.dedent(
    """\
    import jax.numpy as jnp


    def update(u, f):
        return u.at[0].add(f)


    def shift(u, f):
        return u.at[1].add(f)


    SMALL = jnp.zeros((64, 64), jnp.float32)


    def args():
        return (SMALL, 1.0)
    """
)
# DONATE=none: the tests still pass (budgets only), and each check loses its alias against the baseline
CHECKS = """\
import os

from updates import SMALL, {fn}

DONATE = os.environ.get("DONATE", "all")


def test_{fn}(fieldmem_check):
    fieldmem_check({fn}, SMALL, 1.0, donate=DONATE, in_place=DONATE == "all")
"""


def baseline_names(path: Path) -> list[str]:
    return [entry["name"] for entry in json.loads(path.read_text())["entries"]]


@pytest.mark.compile
def test_the_cli_and_the_plugin_share_one_baseline_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(updates=SHARED, test_a=CHECKS.format(fn="update"), test_b=CHECKS.format(fn="shift"))
    pytester.makefile(".toml", pyproject='[tool.fieldmem]\nmax-live-peak = "1MiB"\ntolerance = "1%"\n')
    baseline = pytester.path / "b.json"
    cli = ("-m", "fieldmem", "check", "--args", "updates:args", "--no-cache")
    # the CLI names the module target updates:update as the file updates.py:update
    saved = pytester.run(sys.executable, *cli, "updates:update", "--save-baseline", "b.json")
    assert saved.ret == 0, saved.stdout.str() + saved.stderr.str()
    assert baseline_names(baseline) == ["updates.py:update"]

    xdist = ("-n", "2", "--dist", "loadfile", "-v", "--fieldmem-isolate=no", "--fieldmem-baseline=b.json")
    result = pytester.runpytest_subprocess(
        *xdist, "--fieldmem-compare-fail", "--fieldmem-save-baseline=b.json", "--fieldmem-report=r.json"
    )
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, text
    assert "[gw0]" in text and "[gw1]" in text  # one test file on each worker
    # the plugin compared updates.py:update with the CLI's entry, found updates.py:shift new, and saved both
    result.stdout.fnmatch_lines(
        ["baseline * (tolerance 1%): 0 regressions, 0 improvements", "*updates.py:shift: new target*"]
    )
    assert "updates.py:update: new target" not in text
    assert baseline_names(baseline) == ["updates.py:shift", "updates.py:update"]
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted(r["target"] for r in report["results"]) == [
        "test_a.py::test_update::updates:update",
        "test_b.py::test_shift::updates:shift",
    ]
    # [tool.fieldmem] max-live-peak is every check's budget
    assert {c["limit"] for r in report["results"] for c in r["checks"] if c["name"] == "max-live-peak"} == {2**20}

    # the CLI reads what the plugin wrote, the target written as a file
    read = pytester.run(sys.executable, *cli, "updates.py:shift", "--baseline", "b.json")
    assert read.ret == 0, read.stdout.str() + read.stderr.str()
    assert "0 regressions" in read.stdout.str() and "new target" not in read.stdout.str()

    # every regression of both workers is listed, and the session fails once; the baseline is left alone
    before = baseline.read_bytes()
    monkeypatch.setenv("DONATE", "none")
    worse = pytester.runpytest_subprocess(*xdist, "--fieldmem-compare-fail")
    assert worse.ret == pytest.ExitCode.TESTS_FAILED, worse.stdout.str()
    assert (
        "PASSED test_a.py::test_update" in worse.stdout.str() and "PASSED test_b.py::test_shift" in worse.stdout.str()
    )
    worse.stdout.fnmatch_lines(
        [
            "baseline * (tolerance 1%): * regressions, 0 improvements",
            "*✗ updates.py:update: *",
            "*✗ updates.py:shift: *",
            "fieldmem: error: * regression(s) against the baseline *: the session fails (--fieldmem-compare-fail)",
        ],
        consecutive=False,
    )
    assert worse.stdout.str().count("the session fails") == 1
    assert baseline.read_bytes() == before


# ----------------------------------------------------------------------------
# Run 9: one name per target: a jit alias is named as the user named it, by the CLI, a registered case and
# the plugin alike; a baseline that matches none of the session's checks fails it (issue 48, item 4)

ALIASES = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp

    import fieldmem


    def update(u, f):
        return u.at[0].add(f)


    update_donated = jax.jit(update, donate_argnums=0)
    update_kept = jax.jit(update)  # a second jit of one function: a name of its own
    SMALL = jnp.zeros((64, 64), jnp.float32)


    def args():
        return (SMALL, 1.0)


    fieldmem.case(update_donated, args=args)
    """
)
ALIAS_CHECKS = """\
import os

from aliases import SMALL, update_donated, update_kept

WHICH = os.environ.get("WHICH", "donated")
DONATE = os.environ.get("DONATE", "auto")


def test_alias(fieldmem_check):
    fn = update_donated if WHICH == "donated" else update_kept
    fieldmem_check(fn, SMALL, 1.0, donate=DONATE, in_place=False)
"""


@pytest.mark.compile
def test_a_baseline_saved_from_the_cli_gates_the_same_jit_alias_in_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(aliases=ALIASES, test_aliases=ALIAS_CHECKS)
    cli = ("-m", "fieldmem", "check", "--no-cache")
    saved = pytester.run(sys.executable, *cli, "aliases.py:update_donated", "--save-baseline", "b.json")
    assert saved.ret == 0, saved.stdout.str() + saved.stderr.str()
    assert baseline_names(pytester.path / "b.json") == ["aliases.py:update_donated"]
    # the module's registered case has the same name
    listed = pytester.run(sys.executable, *cli, "aliases.py", "-f", "json")
    assert [r["name"] for r in json.loads(listed.stdout.str())["results"]] == ["aliases.py:update_donated"]

    gate = ("-v", "--fieldmem-isolate=no", "--fieldmem-baseline=b.json", "--fieldmem-compare-fail")
    same = pytester.runpytest_subprocess(*gate)
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    same.stdout.fnmatch_lines(["baseline * (tolerance exact): 0 regressions, 0 improvements"])
    assert "new target" not in same.stdout.str() and "not checked" not in same.stdout.str()

    # the entry gates the plugin's check: without its donation the alias is lost, and the session fails
    monkeypatch.setenv("DONATE", "none")
    worse = pytester.runpytest_subprocess(*gate)
    assert worse.ret == pytest.ExitCode.TESTS_FAILED, worse.stdout.str()
    worse.stdout.fnmatch_lines(["*✗ aliases.py:update_donated: *"], consecutive=False)

    # a baseline that matches none of the session's checks fails it, in one line, asked or not
    monkeypatch.setenv("DONATE", "auto")
    monkeypatch.setenv("WHICH", "kept")
    other = pytester.runpytest_subprocess("-v", "--fieldmem-isolate=no", "--fieldmem-baseline=b.json")
    assert other.ret == pytest.ExitCode.TESTS_FAILED, other.stdout.str()
    errors = [line for line in other.stdout.str().splitlines() if line.startswith("fieldmem: error:")]
    assert len(errors) == 1, other.stdout.str()
    assert "matches none of this run's targets" in errors[0] and "aliases.py:update_kept" in errors[0], errors
    assert "new target" not in other.stdout.str()


def test_a_deviceless_backend_whose_compiler_is_missing_gets_an_environment_first(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """As ``fieldmem check`` does (issue 48): a deviceless backend's worker has its environment variables, and
    where its compiler is not installed here, runs in a cached environment that has it; fieldmem says so first."""
    import fieldmem.parent.interpreters as interpreters
    import fieldmem.request.backends as backends
    from fieldmem.frontends.pytest_session import _worker_for
    from fieldmem.parent.spawn import Interpreter

    made: list[tuple[list[str], str]] = []

    def compilers(platforms: list[str], version: str, say: Any = None) -> Interpreter:
        made.append((list(platforms), version))
        return Interpreter("python-there", label=f"jax {version} with tpu")

    monkeypatch.setattr(interpreters, "compilers_interpreter", compilers)
    monkeypatch.setattr(backends, "extra_installed", lambda backend: not backend.deviceless)
    interpreter, environ = _worker_for("tpu:v5e", None)
    assert interpreter is not None and interpreter.python == "python-there" and made == [(["tpu"], made[0][1])]
    assert environ["JAX_PLATFORMS"] == "cpu" and environ["TPU_SKIP_MDS_QUERY"] == "1"
    err = capfd.readouterr().err
    assert err.startswith("fieldmem: tpu:v5e: its compiler is not installed here; checking in a cached environment")
    # the machine's own backend: this Python, its environment as it is
    assert _worker_for("cpu", None) == (None, {})
    assert _worker_for(None, None) == (None, {})
