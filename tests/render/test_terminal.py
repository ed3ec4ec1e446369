"""Reading fieldmem in a terminal: layouts at 80 and 120 columns, the suggested code's name, progress.

The layouts are checked on the bundled examples' real reports (compiled
here), by their content: no label split across lines, every wrapped finding
continued under its own text, no record of a verbose table folded at 80
columns. Progress is drawn only on a terminal: a rich console forced into
terminal mode shows the target and the elapsed time; a pipe gets nothing.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.frontends.command_line import progress_display
from fieldmem.frontends.command_line import stderr_console as _stderr_console
from fieldmem.model.report import Report
from fieldmem.parent.checker import check, check_targets
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.render.layout import Column, fitted_table, hanging
from fieldmem.render.suggest import named_code
from fieldmem.render.table import DetailsAhead
from fieldmem.request.options import CheckOptions
from fieldmem.request.target import TargetOptions, resolve_target

from factories import make_report, make_result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WIDTHS = (80, 120)


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    """The examples' reports: an optimizer step with --suggest, and the precision chain (which breaks)."""
    suggest = CheckOptions(suggest=True)
    return {
        "optimizer": check([str(EXAMPLES / "optimizer.py")], options=suggest),
        "advisor": check([str(EXAMPLES / "advisor.py")], options=suggest),
        "chain": check([str(EXAMPLES / "precision_chain.py")]),
    }


def table(report: Report, width: int, verbose: bool = True) -> str:
    return get_renderer("table").render(report, RenderOptions(verbose=verbose, width=width))


def _block_after(text: str, heading: str) -> list[str]:
    """The lines after ``heading`` up to the next blank line."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if heading in line)
    block = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        block.append(line)
    return block


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


@pytest.mark.compile
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["optimizer", "advisor", "chain"])
def test_no_line_is_wider_than_the_terminal(reports: dict[str, Report], name: str, width: int) -> None:
    for verbose in (False, True):
        text = table(reports[name], width, verbose)
        assert all(len(line) <= width for line in text.splitlines()), text


@pytest.mark.compile
@pytest.mark.parametrize("width", WIDTHS)
def test_the_chain_labels_are_never_split(reports: dict[str, Report], width: int) -> None:
    text = table(reports["chain"], width)
    lines = text.splitlines()
    for label in ("separate jits (max)", "one jit (fused)", "1 advance", "2 to_storage", "3 squash"):
        assert any(label in line for line in lines), (label, text)
    assert not any(line.strip() in ("separ", "ate", "jits", "(fuse", "d)") for line in lines), text
    # each step's status is on the line of its label
    assert any("2 to_storage" in line and "BREAKS" in line for line in lines), text


@pytest.mark.compile
@pytest.mark.parametrize("width", WIDTHS)
def test_the_chain_keeps_every_figure_at_any_width(reports: dict[str, Report], width: int) -> None:
    """At 80 columns the live peak and what is kept alive move under the step; nothing is dropped."""
    chain = reports["chain"].chains[0]
    text = table(reports["chain"], width)
    flat = " ".join(text.split())
    for step in chain.steps:
        if step.live_peak:
            from fieldmem.render.pieces import pair

            assert pair(step.live_peak["plain"], step.live_peak["donated"]) in flat
        for kept in step.kept_alive:
            assert kept in flat


def _wrapped_items(text: str, marks: tuple[str, ...]) -> list[list[str]]:
    """Each bullet or check line of ``text`` with its continuation lines (the lines up to the next item)."""
    items: list[list[str]] = []
    current: list[str] | None = None
    item = re.compile(r"^ {2,4}(" + "|".join(re.escape(m) for m in marks) + r") ")
    for line in text.splitlines():
        if item.match(line):
            current = [line]
            items.append(current)
        elif current is not None and line.startswith(" " * (_indent(current[0]) + 2)) and line.strip():
            current.append(line)
        else:
            current = None
    return items


@pytest.mark.compile
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["optimizer", "advisor", "chain"])
def test_wrapped_findings_hang_under_their_text(reports: dict[str, Report], name: str, width: int) -> None:
    """A finding that wraps continues under its own text (after the bullet), never at the margin."""
    text = table(reports[name], width, verbose=True)
    items = _wrapped_items(text, ("•", "✓", "✗"))
    assert items, text
    wrapped = [i for i in items if len(i) > 1]
    if width == 80:
        assert wrapped, text  # the examples' findings are longer than 80 columns
    for item in wrapped:
        text_column = _indent(item[0]) + 2  # after "• "
        assert all(_indent(line) == text_column for line in item[1:]), item
    # no line starts at the left margin except headings (a target's, a chain's, the summary table's)
    margin = [line for line in text.splitlines() if line and not line.startswith(" ")]
    for line in margin:
        assert not line.startswith(("examples/", "MiB", "(")), (line, text)


@pytest.mark.compile
def test_the_findings_read_the_same_at_80_and_120(reports: dict[str, Report]) -> None:
    """Wrapping moves words between lines and drops nothing: every finding reads whole at both widths."""
    result = reports["chain"].chains[0]
    for width in WIDTHS:
        flat = " ".join(table(reports["chain"], width).split())
        for step in result.steps:
            for handoff in step.handoffs:
                if handoff.breaks:
                    assert " ".join(handoff.message.split()) in flat


@pytest.mark.compile
def test_verbose_tables_are_records_at_80_and_rows_fit(reports: dict[str, Report]) -> None:
    """At 80 columns: the memory table keeps one line per figure; the per-leaf and live-at-peak
    tables become records whose first line holds whole cells (no leaf name folded)."""
    report = reports["optimizer"]
    (result,) = report.results
    text = table(report, 80)
    figures = _block_after(text, "figure                    plain")
    from fieldmem.model.memory import MEMORY_FIGURES

    assert [line.split()[0] for line in figures[1:]] == list(MEMORY_FIGURES)  # one line per figure, none wrapped
    lines = text.splitlines()
    assert result.suggestion is not None
    for argument in result.suggestion.arguments:
        for leaf in argument.leaves:
            # the leaf's name is whole on its record's first line, beside its number and size
            assert any(
                re.match(rf"^\s+{leaf.input_index}\s+{re.escape(leaf.input)}\s+\S+ \S+\s+{leaf.code}\b", line)
                for line in lines
            ), (leaf.input, text)
    donated = result.variants["donated"]
    for alias in donated.aliases:
        assert any(alias.input in line and line.rstrip().endswith(_bytes(alias.bytes)) for line in lines), alias
        assert any(line.strip().startswith(f"→ {alias.output}") for line in lines), alias


def _bytes(value: int) -> str:
    from fieldmem.model.units import format_bytes

    return format_bytes(value)


@pytest.mark.compile
def test_at_120_the_small_tables_stay_tables(reports: dict[str, Report]) -> None:
    text = table(reports["chain"], 120)
    header = next(line for line in text.splitlines() if line.startswith("step "))
    assert "kept alive" in header and "Δ donated" in header  # the chain's one-line-per-step table


def test_fitted_table_is_a_table_when_it_fits_and_records_when_not() -> None:
    columns = [Column("name"), Column("bytes", "right"), Column("reason", below="")]
    rows = [("params['layer0']['w']", "2.0 MiB", "every output of its size is already taken " * 3)]

    def show(item: object, width: int) -> str:
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None).print(item)
        return buffer.getvalue()

    wide = show(fitted_table(columns, rows, 400), 400)
    assert "reason" in wide.splitlines()[1]  # a header row naming every column
    narrow = show(fitted_table(columns, rows, 60), 60)
    lines = [line.rstrip() for line in narrow.splitlines() if line.strip()]
    assert lines[0].split() == ["name", "bytes"]
    assert lines[1].split() == ["params['layer0']['w']", "2.0", "MiB"]
    assert all(line.startswith("      ") for line in lines[2:]) and len(lines) > 3  # the reason, hanging
    assert all(len(line) <= 60 for line in lines)


def test_hanging_continues_under_the_text() -> None:
    buffer = io.StringIO()
    Console(file=buffer, width=40, color_system=None).print(hanging("• ", "word " * 30))
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("  • word") and len(lines) > 2
    assert all(line.startswith("    word") for line in lines[1:])


# ---- the suggested code names the target as the user's module does ------------------------------


@pytest.mark.parametrize(
    ("code", "target", "expected"),
    [
        (
            'jax.jit(step, donate_argnames=("params",))',
            "train.py:adamw_step",
            'adamw_step = jax.jit(step, donate_argnames=("params",))',
        ),
        ("jax.jit(step, donate_argnums=(0,))", "train.py:step", "jax.jit(step, donate_argnums=(0,))"),
        ("jax.jit(step, donate_argnums=(0,))", "train.py", "jax.jit(step, donate_argnums=(0,))"),
        ("nnx.jit(step, donate_argnums=(0,))", "pkg.train:fast", "fast = nnx.jit(step, donate_argnums=(0,))"),
        ("jax.jit(step, donate_argnums=(0,))", "train.py:a,b", "jax.jit(step, donate_argnums=(0,))"),
    ],
)
def test_named_code(code: str, target: str, expected: str) -> None:
    assert named_code(code, target) == expected


@pytest.mark.compile
def test_the_suggestion_for_a_renamed_jit_uses_the_users_name(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import jax
            import jax.numpy as jnp

            def step(params, grads):
                return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

            adamw_step = jax.jit(step)

            def make_args():
                return ({"w": jnp.ones((64, 64))}, {"w": jnp.ones((64, 64))})
            """
        )
    )
    spec = f"{tmp_path / 'train.py'}:adamw_step"
    report = check([spec], TargetOptions(args="make_args"), CheckOptions(suggest=True))
    (result,) = report.results
    assert result.status == "ok" and result.suggestion is not None and result.suggestion.code is not None
    text = table(report, 120, verbose=False)
    assert f"adamw_step = {result.suggestion.code}" in text
    assert "jax.jit(step, " in result.suggestion.code  # the function jit wraps, as the user wrote it


# ---- errors: the full line on stderr, one line in the report ---------------------------------------


def test_an_error_is_one_line_in_the_table_and_whole_on_stderr(in_assets: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["check", "models.py:step", "--args", "models:factory_mismatch"], env={"COLUMNS": "80"})
    assert result.exit_code == 2
    stderr = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(stderr) == 1 and stderr[0].startswith("fieldmem: error: models.py:step: tracing/lowering failed")
    message = stderr[0].split(": ", 3)[3]
    details = result.stdout.split("models.py:step  (")[1].splitlines()[1:]
    assert len(details) == 1 and details[0].startswith("  error: tracing/lowering failed")
    assert len(details[0]) <= 80
    assert message not in result.stdout or len(message) <= 80 - len("  error: ")
    # -v shows the whole message in the report too
    verbose = runner.invoke(
        app, ["check", "models.py:step", "--args", "models:factory_mismatch", "-v"], env={"COLUMNS": "80"}
    )
    assert " ".join(message.split()) in " ".join(verbose.stdout.split())


# ---- progress ------------------------------------------------------------------------------------


def test_no_progress_and_nothing_written_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    assert _stderr_console() is None
    with progress_display(_stderr_console()) as progress:
        assert progress is None
    assert piped.getvalue() == ""


# ---- the details rendered while the check runs ---------------------------------------------------------


class _Counted(DetailsAhead):
    """:class:`DetailsAhead` counting the details it gave."""

    taken = 0

    def take(self, *args: Any) -> str | None:
        text = super().take(*args)
        self.taken += text is not None
        return text


@pytest.mark.compile
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["optimizer", "advisor", "chain"])
def test_details_rendered_ahead_are_the_table_s_own(reports: dict[str, Report], name: str, width: int) -> None:
    report = reports[name]
    for verbose in (False, True):
        options = RenderOptions(verbose=verbose, width=width)
        ahead = _Counted(options)
        for result in report.results:
            ahead.add(result)
        assert ahead.render(report, options) == table(report, width, verbose)
        assert ahead.taken == len(report.results)


def test_details_rendered_for_other_options_or_needing_escapes_are_rendered_at_the_end() -> None:
    """A terminal resized during the check (another width), and a name that must be escaped: rendered at the
    end, the same table."""
    plain, hostile = make_result("model:step"), make_result("model:\x1b[31mstep")
    report = make_report((plain, hostile))
    ahead = _Counted(RenderOptions(width=80))
    for result in report.results:
        ahead.add(result)
    wide = RenderOptions(width=120)
    assert ahead.render(report, wide) == get_renderer("table").render(report, wide)
    assert ahead.taken == 0
    ahead = _Counted(RenderOptions(width=80))
    for result in report.results:
        ahead.add(result)
    assert ahead.render(report, RenderOptions(width=80)) == get_renderer("table").render(
        report, RenderOptions(width=80)
    )
    assert ahead.taken == 1  # the plain one; the escaped name is rendered from the escaped report
    assert "\\x1b" in get_renderer("table").render(report, RenderOptions(width=80))


@pytest.mark.compile
def test_the_cli_renders_each_target_s_details_while_the_worker_checks(
    in_assets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    added: list[str] = []
    taken: list[bool] = []
    add, take = DetailsAhead.add, DetailsAhead.take

    def counted_add(self: DetailsAhead, result: Any) -> None:
        added.append(result.name)
        add(self, result)

    def counted_take(self: DetailsAhead, *args: Any) -> str | None:
        text = take(self, *args)
        taken.append(text is not None)
        return text

    monkeypatch.setattr(DetailsAhead, "add", counted_add)
    monkeypatch.setattr(DetailsAhead, "take", counted_take)
    args = ["check", "models.py:step", "models.py:scale", "--args", "models:make_args", "--no-cache"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    assert added == ["models.py:step", "models.py:scale"] and taken == [True, True]
    assert "models.py:step" in result.stdout and "models.py:scale" in result.stdout


def test_the_progress_shows_the_target_and_the_elapsed_time() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, color_system=None)
    with progress_display(console) as progress:
        assert progress is not None
        progress("optimizer:sgd_step", 0, 2)
        first = buffer.getvalue()
        progress("stencil_scan:diffuse", 1, 2)
        progress("", 2, 2)
    text = buffer.getvalue()
    assert "checking optimizer:sgd_step" in first and "0/2" in first
    assert re.search(r"\b0:00:0\d\b", first), first  # elapsed
    assert "checking stencil_scan:diffuse" in text and "1/2" in text
    assert text.rstrip().endswith("\x1b[2K") or "\x1b[2K" in text.splitlines()[-1]  # transient: cleared at the end


@pytest.mark.compile
def test_a_real_check_reports_each_target_to_the_progress() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120, color_system=None)
    targets = resolve_target(str(EXAMPLES / "optimizer.py"), TargetOptions()) + resolve_target(
        str(EXAMPLES / "stencil_scan.py"), TargetOptions()
    )
    with progress_display(console) as progress:
        report = check_targets(targets, CheckOptions(), progress=progress)
    text = buffer.getvalue()
    for result in report.results:
        assert f"checking {result.name}" in text
    assert f"{len(report.results)}/{len(report.results)}" in text


def test_the_cli_writes_no_progress_to_a_pipe(in_assets: Path) -> None:
    result = CliRunner().invoke(app, ["check", "models.py:step", "models.py:scale", "--args", "models:make_args"])
    assert "checking" not in result.stderr and "\r" not in result.stderr and "\x1b" not in result.stderr


# ---- colour and width: rich decides, from stdout and the environment ------------------------------------

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_TERMINAL_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "TERM")


def _colours(text: str) -> set[int]:
    """The SGR parameters in ``text`` that set a colour (foreground or background), not bold, dim or reset."""
    params = {int(p) for group in _SGR.findall(text) for p in group.split(";") if p}
    return {p for p in params if 30 <= p <= 38 or 40 <= p <= 48 or 90 <= p <= 107}


def _fieldmem(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fieldmem ARGS`` in a process of its own, its stdout a pipe, with only ``env``'s terminal settings."""
    clean = {k: v for k, v in os.environ.items() if k not in _TERMINAL_ENV}
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )


@pytest.fixture
def saved_report(tmp_path: Path) -> Path:
    """A saved report: ``fieldmem compare`` shows it beside itself without compiling anything."""
    from factories import make_report, make_result

    path = tmp_path / "report.json"
    path.write_text(get_renderer("json").render(make_report((make_result("model:step"),)), RenderOptions()))
    return path


@pytest.mark.parametrize(
    ("env", "styles", "colours"),
    [
        ({}, False, False),  # a pipe: plain text
        ({"FORCE_COLOR": "1"}, True, True),  # asked for through the pipe (the issue: it was ignored)
        ({"TTY_COMPATIBLE": "1"}, True, True),
        ({"NO_COLOR": "1"}, False, False),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, True, False),  # styles (bold, dim) but no colour
        ({"FORCE_COLOR": "1", "TERM": "dumb"}, False, False),
        ({"FORCE_COLOR": "1", "TTY_COMPATIBLE": "0"}, False, False),
    ],
)
def test_colour_is_what_rich_reads_of_the_environment(
    saved_report: Path, env: dict[str, str], styles: bool, colours: bool
) -> None:
    result = _fieldmem(["compare", str(saved_report), str(saved_report)], env, saved_report.parent)
    assert result.returncode == 0, result.stderr
    assert "no differences" in result.stdout
    assert ("\x1b[" in result.stdout) is styles, repr(result.stdout[:300])
    assert bool(_colours(result.stdout)) is colours, _colours(result.stdout)
    assert "\x1b" not in result.stderr


def test_the_terminal_options_are_rich_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """``COLUMNS`` is the width whatever it is (no floor of fieldmem's own); colour follows FORCE_COLOR."""
    from fieldmem.frontends.output import terminal_options

    monkeypatch.setenv("COLUMNS", "57")
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe
    options = terminal_options(False, 1024)
    assert (options.width, options.color) == (57, False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    forced = terminal_options(False, 1024)
    assert (forced.color, forced.color_system, forced.no_color) == (True, "256", False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert terminal_options(False, 1024).no_color


@pytest.mark.compile
def test_the_check_s_width_and_colour_come_from_the_environment(in_assets: Path) -> None:
    """COLUMNS=140: the summary as one row per target (in colour, FORCE_COLOR through a pipe);
    COLUMNS=60: stacked, plain, no line wider than 60."""
    args = ["check", "models.py:step", "--args", "models:make_args"]
    wide = _fieldmem(args, {"COLUMNS": "140", "FORCE_COLOR": "1"}, in_assets)
    assert wide.returncode == 0, wide.stderr
    plain = _SGR.sub("", wide.stdout)
    assert "plain/donated" in plain and "copies 1 → 0" not in plain  # the wide table's header, no stack
    assert _colours(wide.stdout), repr(wide.stdout[:300])
    narrow = _fieldmem(args, {"COLUMNS": "60"}, in_assets)
    assert narrow.returncode == 0, narrow.stderr
    assert "plain/donated" not in narrow.stdout and "copies 1 → 0 · donated u, row" in narrow.stdout
    assert "\x1b" not in narrow.stdout
    assert all(len(line) <= 60 for line in narrow.stdout.splitlines()), narrow.stdout


# ---- no wrapped line starts at the left margin -----------------------------------------------------------

_RULE = re.compile(r"^[─━═ ]+$")


def _margin_heads(text: str) -> set[str]:
    """The first word of each line that starts at the left margin."""
    return {line.split()[0] for line in text.splitlines() if line.strip() and not line[0].isspace()}


def assert_no_line_wraps_to_the_margin(render: Callable[[int], str], widths: tuple[int, ...]) -> None:
    """At each width, a line at the left margin begins what begins a line there when nothing wraps (a
    heading, the summary table's header, a row's target, folded or whole), or is a table's rule: never
    the continuation of a wrapped line. No line is wider than the width."""
    heads = _margin_heads(render(100_000))
    assert heads
    for width in widths:
        text = render(width)
        for line in text.splitlines():
            assert len(line) <= width, (width, line, text)
            if not line.strip() or line[0].isspace() or _RULE.match(line):
                continue
            first = line.split()[0]
            assert any(head.startswith(first) for head in heads), (width, line, text)


@pytest.mark.compile
@pytest.mark.parametrize("name", ["optimizer", "advisor", "chain"])
@pytest.mark.parametrize("verbose", [False, True])
def test_no_line_of_the_examples_wraps_to_the_margin(reports: dict[str, Report], name: str, verbose: bool) -> None:
    assert_no_line_wraps_to_the_margin(lambda width: table(reports[name], width, verbose), MARGIN_WIDTHS)


MARGIN_WIDTHS = (60, 80, 100)
_LONG = "models.training.transformer_with_a_rather_long_module_path:train_step_with_gradient_accumulation"


def _baseline_report() -> Report:
    """A report gated against a baseline: long target names in regressions, improvements, accepted
    checks and notes, and a long baseline path."""
    from fieldmem.model.comparison import Accepted, BaselineComparison, Change

    from factories import make_report, make_result

    def change(kind: str, message: str) -> Change:
        return Change(target=_LONG, kind=kind, subject="footprint_bytes", message=f"{_LONG}: {message}")

    comparison = BaselineComparison(
        path="ci/baselines/a_baseline_file_in_a_folder_of_its_own/fieldmem-baseline.json",
        regressions=(
            change("figure", "donated footprint 2.0 MiB → 6.0 MiB (+4.0 MiB, +200.0%) over the tolerance 5%"),
            change("copy", "new donated copy [loop] of f32[512,512] at models/training.py:14 (1.0 MiB)"),
        ),
        improvements=(change("alias", "alias gained: params['layer0']['w'] → out[0]['layer0']['w']"),),
        notes=(f"{_LONG}: recorded with jax 0.10.1, checked with jax 0.10.2: figures may differ for that alone",),
        tolerance="5%",
        accepted=(Accepted(target=_LONG, checks=("max-peak",)),),
    )
    return make_report((make_result(_LONG),), baseline=comparison)


@pytest.mark.parametrize("verbose", [False, True])
def test_the_baseline_summary_hangs_under_its_marks(verbose: bool) -> None:
    """Issue 30: the baseline summary's lines wrapped back to column 0."""
    report = _baseline_report()
    assert_no_line_wraps_to_the_margin(lambda width: table(report, width, verbose), MARGIN_WIDTHS)
    text = table(report, 60, verbose)
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("baseline "))
    marks = [n for n, line in enumerate(lines) if n > start and line.startswith(("  ✗ ", "  ✓ ", "  = ", "  • "))]
    assert len(marks) == 5, text
    for n in marks:  # each item's wrapped lines continue under its text, after the mark
        following = lines[n + 1 : next((m for m in marks if m > n), len(lines))]
        assert following and all(line.startswith("    ") and line[4] != " " for line in following), text
    flat = " ".join(text.split())
    assert "5%): 2 regressions, 1 improvement" in flat  # the headline reads whole, wrapped or not


def test_wrapped_continues_two_columns_in() -> None:
    from fieldmem.render.layout import wrapped

    buffer = io.StringIO()
    console = Console(file=buffer, width=30, color_system=None)
    console.print(wrapped("fieldmem 0.1.0 · jax 0.10.2 · cpu · 1 device (figures are per device)"))
    console.print(wrapped("a_name_much_longer_than_the_thirty_columns_it_has", indent=2))
    lines = buffer.getvalue().splitlines()
    assert lines[:3] == ["fieldmem 0.1.0 · jax 0.10.2 ·", "  cpu · 1 device (figures are", "  per device)"]
    assert lines[3:] == ["  a_name_much_longer_than_the_", "    thirty_columns_it_has"]


def test_the_side_by_side_comparison_wraps_under_its_text_too() -> None:
    """``fieldmem compare`` (and ``--backend a,b``): a long target name folds under itself, each difference
    hangs under its mark."""
    from fieldmem.gate.compare import compare_reports
    from fieldmem.render.compare import get_compare_renderer

    from factories import MIB, make_memory, make_report, make_result, make_variant

    def report(alias: int) -> Report:
        memory = make_memory(argument=2 * MIB, output=2 * MIB, alias=alias)
        return make_report((make_result(_LONG, donated=make_variant("donated", memory)),))

    comparison = compare_reports([("reference.json", report(2 * MIB)), ("without-the-aliases.json", report(0))])
    assert comparison.rows[0].differences
    assert_no_line_wraps_to_the_margin(
        lambda width: get_compare_renderer("table").render(comparison, RenderOptions(width=width)), MARGIN_WIDTHS
    )
