"""Issue 29, items 3 and 4: user text is shown, never obeyed, and fieldmem's own code prints no traceback.

A name that holds a line break followed by ``::error file=evil.py,line=1::``,
ESC, BEL, NUL, a lone surrogate, ``%0A``, rich markup, an emoji code, ``##[``
(GitHub's older commands), a bidirectional override, C1 and CR, put into every
free-text field of a report (names, targets, files, pytree paths, messages),
goes through every renderer: the table (wide and stacked, plain and verbose,
coloured or not, at several widths), GitHub annotations, Markdown (the job
summary), HTML, JSON, ``fieldmem compare``'s three formats, chains, ``--suggest``,
the baseline's comparison and the line ``--save-baseline`` prints. Each output
renders, encodes as UTF-8, holds no raw control character but its own line
breaks (and, coloured, its own colour codes), and no line of it is a workflow
command the GitHub runner would read, except fieldmem's own annotations, none
of which carries the injected one. The rule is one module,
:mod:`fieldmem.model.escaping`.

Then the command line, in a subprocess as CI runs it with a strict UTF-8 (or a
Latin-1) stdout: a module whose ``fieldmem.case`` name is hostile (the table,
``--format github``, ``--save-baseline`` and reading it back), a target path
with a byte that is not UTF-8, and targets that close the worker's file
descriptors (at import, while traced): one ``fieldmem:`` line on stderr where
there is an error, exit codes as docs/guarantees.md says, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest

from fieldmem.gate.baseline import load_baseline, save_baseline
from fieldmem.gate.compare import compare_reports
from fieldmem.model.advice import ArgumentAdvice, LeafAdvice, Suggestion
from fieldmem.model.chain import Chain, ChainBreak, ChainCost, ChainStep, HandOff
from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.copies import Alias, UnusableDonation
from fieldmem.model.environment import Deviceless
from fieldmem.model.errors import one_line
from fieldmem.model.escaping import defused, json_defused, visible, visible_strings
from fieldmem.model.memory import LiveBuffer
from fieldmem.model.report import Report
from fieldmem.model.run import AliasCheck, DeviceMemory, InPlaceProbe, RunCheck
from fieldmem.model.target import MadeStatic
from fieldmem.model.verdict import Check, Finding
from fieldmem.render import RENDERERS, RenderOptions
from fieldmem.render.baseline import render_comparison, render_saved
from fieldmem.render.compare import COMPARE_RENDERERS

from factories import (
    MIB,
    make_copy,
    make_error_result,
    make_input,
    make_memory,
    make_output,
    make_report,
    make_result,
    make_timeline,
    make_variant,
)

ROOT = Path(__file__).resolve().parents[2]

# every trick at once: a line break then a workflow command, colour, bell, NUL, a lone surrogate, an
# escaped line break, rich markup, an emoji code, GitHub's older command syntax, a bidirectional override,
# C1, CR and a tab
HOSTILE = (
    "evil\n::error file=evil.py,line=1::INJECTED \x1b[31mRED \x07bel \x00nul \udcff %0A [bold]x[/bold] "
    ":warning: ##[warning]OLD \u202eedoc\u202c \x85 \r\t"
)
# long words then a command after a blank: where a table or a wrapped paragraph breaks the line
WRAPS = " " + "w" * 33 + " ::error file=evil.py,line=1::WRAPPED " + "v" * 41 + " ::warning::WRAPPED2 "
NAME = HOSTILE + WRAPS

# what the GitHub runner registers (actions/runner ActionCommandManager), read by the two parsers below
COMMANDS = frozenset(
    {
        *("error", "warning", "notice", "debug", "group", "endgroup", "add-mask", "stop-commands"),
        *("set-output", "set-env", "save-state", "add-path", "add-matcher", "remove-matcher", "echo"),
        "internal-set-repo-path",
    }
)
FIELDMEM_COMMANDS = frozenset(("error", "warning", "notice"))
SGR = re.compile("\x1b\\[[0-9;]*m")
# what no output may hold raw: C0 but its line break and tab, DEL, C1, separators, bidi controls, surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# ---------------------------------------------------------------------------------------------------------
# The runner's reading of a log line (actions/runner src/Runner.Common/ActionCommand.cs)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    properties: dict[str, str]
    data: str


def _unescape(text: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for token, replacement in pairs:
        text = text.replace(replacement, token)
    return text


_DATA = (("\r", "%0D"), ("\n", "%0A"), ("%", "%25"))
_PROPERTY = (("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C"), ("%", "%25"))


def _v2(line: str) -> Command | None:
    """``::name k=v,k=v::data``, after leading white space."""
    message = line.lstrip()
    if not message.startswith("::"):
        return None
    end = message.find("::", 2)
    if end < 0:
        return None
    info = message[2:end]
    name, _, properties = info.partition(" ")
    if name.lower() not in COMMANDS:
        return None
    props = {}
    for item in properties.strip().split(","):
        key, eq, value = item.partition("=")
        if eq and key and value:
            props[key] = _unescape(value, _PROPERTY)
    return Command(name.lower(), props, _unescape(message[end + 2 :], _DATA))


def _v1(line: str) -> Command | None:
    """``##[name k=v;k=v]data`` anywhere in the line."""
    start = line.find("##[")
    if start < 0:
        return None
    end = line.find("]", start)
    if end < 0:
        return None
    name = line[start + 3 : end].partition(" ")[0]
    return Command(name.lower(), {}, line[end + 1 :]) if name.lower() in COMMANDS else None


def commands(text: str) -> list[Command]:
    """Every workflow command the runner would read in ``text`` (its lines end at CR, LF or CRLF)."""
    found = []
    for line in re.split("\r\n|\r|\n", text):
        command = _v2(line) or _v1(line)
        if command is not None:
            found.append(command)
    return found


def assert_shown_not_obeyed(text: str, *, color: bool = False, github: bool = False) -> None:
    """``text`` holds no raw control character but its own line breaks and tabs (``color``: and SGR codes),
    encodes as UTF-8, and no line is a workflow command (``github``: but fieldmem's own annotations, none
    carrying the injected one)."""
    shown = SGR.sub("", text) if color else text
    raw = RAW.findall(shown)
    assert not raw, (raw[:5], text[:2000])
    text.encode("utf-8")  # a lone surrogate would raise
    found = commands(shown)
    if not github:
        assert not found, (found[:3], text[:3000])
        return
    lines = [line for line in text.split("\n") if line]
    assert len(found) == len(lines), "every line is one of fieldmem's commands, and each line only one"
    for command in found:
        assert command.name in FIELDMEM_COMMANDS, command
        assert command.properties.get("file") != "evil.py" and command.properties.get("line") != "1", command
        assert not command.data.startswith("::") and "\n" not in command.properties.get("title", ""), command


# ---------------------------------------------------------------------------------------------------------
# A report with every kind of record, then the hostile text put into each of its free-text fields


def _rich_report() -> Report:
    copies = (
        make_copy(of="u", source="model.py:14", call_site="model.py:3"),
        make_copy(2 * MIB, kind="loop", source="model.py:20", trip_count=4, cause="old-carry-read-after-update"),
        make_copy(MIB, kind="conditional", source="model.py:22", branch="true", branch_source="model.py:21"),
    )
    timeline = make_timeline(
        (MIB, 3 * MIB, 2 * MIB), peak_position=1, peak_instruction="add.3", peak_source="model.py:5"
    )
    live = (LiveBuffer(MIB, "parameter", "u.1", "f32[512,512]", "model.py:2", input="u", call_site="model.py:1"),)
    run = RunCheck(
        aliases=(AliasCheck("u", 0, "out", 0, True, "same buffer"),),
        kept=("u",),
        devices=(DeviceMemory(0, 1, 2, 3, 4, 5, -1),),
        seconds=0.01,
        worst_device=0,
    )
    donated = make_variant(
        "donated",
        aliases=(Alias("u", 0, "out", 0, MIB),),
        unusable_donations=(UnusableDonation("v", 1, MIB, "no output of its size", "no-output-of-size"),),
        copies=copies,
        jax_warnings=("Some donated buffers were not usable: f32[8]",),
        live_at_peak=live,
        timeline=timeline,
        run=run,
        memory=make_memory(4 * MIB, 4 * MIB, 4 * MIB, unavailable={"generated_code_bytes": "not on this backend"}),
    )
    plain = make_variant("plain", copies=copies[:1], live_at_peak=live, timeline=timeline, run=run)
    findings = (
        Finding("error", "parameter-copy", "u is copied", input="u", output="out", source="model.py:14", bytes=MIB),
        Finding("warning", "loop-copy", "a loop copies v", source="model.py:20", call_site="model.py:2", bytes=MIB),
        Finding("info", "plain-copy", "the plain variant copies u", source="model.py:9"),
    )
    leaf = LeafAdvice("u", 0, MIB, "reused", "an output reuses it", output="out", saved_bytes=MIB)
    suggestion = Suggestion(
        summary="donate u",
        spec="u",
        donate_argnums=(0,),
        donate_argnames=("u",),
        code="jax.jit(step, donate_argnums=(0,))",
        alternative_code="jax.jit(step, donate_argnames=('u',))",
        arguments=(ArgumentAdvice("u", 0, True, "donate", "it pays", MIB, MIB, (leaf,), MIB),),
        verified_by="suggested",
        compiles=1,
        tried=("u",),
        memory=make_memory(4 * MIB, 4 * MIB, 4 * MIB),
    )
    main = make_result(
        "model:step",
        plain=plain,
        donated=donated,
        findings=findings,
        checks=(Check("expect-in-place", False, "u is copied: not in place"),),
        suggestion=suggestion,
        probes=(
            InPlaceProbe("u", "out", "dynamic-update-slice", "slice-only", "flat time"),
            InPlaceProbe("v", "out2", "scatter", "not-probed", "no slice update of v"),
        ),
        made_static=(MadeStatic("config['n']", "concrete", "a Python int"), MadeStatic("act", "not-traceable", "fn")),
        inputs=(make_input("u"), make_input("v", 1)),
        outputs=(make_output("out"), make_output("out2", 1)),
    )
    step = make_result("model:a,b[fused]")
    steps = (
        ChainStep(0, "a", step.name, "in-place", "in place", definition="model.py:30", footprint={"donated": MIB}),
        ChainStep(
            1,
            "b",
            step.name,
            "breaks",
            "b breaks in place",
            definition="model.py:40",
            footprint={"donated": 2 * MIB, "plain": 3 * MIB},
            kept_alive=("u",),
            handoffs=(HandOff(1, "dtype-change", "u", "out", "f32", "bf16", "u changes dtype", source="model.py:41"),),
            grows_by=MIB,
            extras=("rng",),
        ),
    )
    chain = Chain(
        target="model.py",
        name="model:a,b",
        in_place=False,
        summary="breaks in place at step 2 of 2",
        steps=steps,
        fused=step.name,
        first_break=ChainBreak(1, "b", "u changes dtype", leaf="u", source="model.py:41"),
        costs=(ChainCost("steps", MIB, MIB, MIB, MIB, worst_step=1), ChainCost("fused", MIB, MIB, MIB, MIB)),
        cost_summary="fused saves 1.0 MiB",
        expect="in-place",
        checks=(Check("expect-in-place", False, "breaks in place at step 2"),),
    )
    change = Change("model:step", "figure", "peak_bytes", "peak grew 1.0 MiB", MIB, 2 * MIB, source="model.py:14")
    baseline = BaselineComparison(
        path="baseline.json",
        regressions=(change,),
        improvements=(dataclasses.replace(change, message="temp shrank"),),
        notes=("model:gone is in the baseline but was not checked",),
        tolerance="peak:5%",
    )
    return make_report(
        (main, make_error_result("model:broken", message="tracing failed: bad shape"), step),
        chains=(chain,),
        baseline=baseline,
        deviceless=Deviceless("tpu:v5e:2x2", "tpu", "v5e", "TPU v5 lite", "2x2", 4, True, "compiled without it"),
        created="2026-12-04T00:00:00+00:00",
    )


_STRUCTURE = {("Report", "schema"), ("Variant", "name")}  # fieldmem's own keys, never the user's text


def poisoned(value: Any, hint: Any = None, text: str = NAME) -> Any:
    """``value`` with ``text`` put before every free-text string of it (not a word of a ``Literal`` set, not a
    dictionary key): names, targets, files, paths, messages."""
    if hint is None:
        hint = type(value)
    origin = typing.get_origin(hint)
    if hint is str:
        return text + value if isinstance(value, str) else value
    if origin is Literal:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if any(typing.get_origin(o) is Literal for o in options):
            return value
        if isinstance(value, str):
            return text + value if str in options else value
        for option in options:
            if isinstance(option, type) and isinstance(value, option):
                return poisoned(value, option, text)
        return value
    if origin is tuple and isinstance(value, tuple):
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return tuple(poisoned(v, item, text) for v in value)
    if origin is dict and isinstance(value, dict):
        item = typing.get_args(hint)[1]
        return {k: poisoned(v, item, text) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = typing.get_type_hints(type(value))
        changes = {
            f.name: poisoned(getattr(value, f.name), hints[f.name], text)
            for f in dataclasses.fields(value)
            if (type(value).__name__, f.name) not in _STRUCTURE
        }
        return dataclasses.replace(value, **changes)
    return value


@pytest.fixture(scope="module")
def hostile() -> Report:
    report = poisoned(_rich_report())
    assert (
        report.results[0].name == NAME + "model:step" and report.results[0].variants["donated"].copies[0].of_parameter
    )
    return report


def _table(report: Report, **options: Any) -> str:
    return RENDERERS["table"].render(report, RenderOptions(**options))


# ---------------------------------------------------------------------------------------------------------
# The rule


def test_visible_escapes_what_acts_and_nothing_else() -> None:
    assert visible("model:step [0] ü → 🚀 %0A a\\b") == "model:step [0] ü → 🚀 %0A a\\b"
    plain = "model:step"
    assert visible(plain) is plain
    assert visible("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert visible("\x00\x07\x1b[31m\x7f\x85\x9f") == "\\x00\\x07\\x1b[31m\\x7f\\x85\\x9f"
    assert visible("\udcff\u2028\u2029\u202e\u2066") == "\\udcff\\u2028\\u2029\\u202e\\u2066"
    assert visible("x ##[error]y") == "x ##\\[error]y"
    shown = visible(NAME)
    assert visible(shown) == shown  # once is enough
    assert "\n" not in shown and not RAW.search(shown) and not commands(shown)
    # fieldmem's own error lines are one line by the same rule
    assert one_line(f"fieldmem: error: {NAME}") == one_line(one_line(f"fieldmem: error: {NAME}"))
    assert not RAW.search(one_line(NAME)) and not commands(one_line(NAME))


def test_defused_keeps_the_formats_own_text_and_breaks_every_command() -> None:
    assert defused("a\n\tb\n") == "a\n\tb\n"
    assert defused("x\n  ::error::y\n::warning::z\n") == "x\n  \\::error::y\n\\::warning::z\n"
    assert defused("::error::fine\n", commands=True) == "::error::fine\n"
    assert defused("a\x1b[1mb\x1b[0m\x07", color=True) == "a\x1b[1mb\x1b[0m\\x07"
    assert defused("\x1b[2J") == "\\x1b[2J"
    assert defused("\x1b[1m::error::x\x1b[0m", color=True) == "\x1b[1m\\::error::x\x1b[0m"
    assert not commands(defused("ok ##[error]x\n"))


def test_json_defused_means_the_same_document() -> None:
    document = {"name": NAME, "k\x7f\udcff": ["##[x", "\u2028"]}
    for ascii_only in (True, False):
        text = json_defused(json.dumps(document, ensure_ascii=ascii_only, indent=1))
        assert json.loads(text) == document
        assert not RAW.search(text) and not commands(text) and text.isascii() >= ascii_only


def test_json_defused_reads_ascii_text_in_its_quick_path() -> None:
    # text the encoder wrote as ASCII takes the quick test; a raw control character or DEL in it is still
    # escaped, and "##[" still defused
    for raw in (*map(chr, [*range(0x09), *range(0x0B, 0x20)]), "\x7f"):
        text = json_defused('{"a": "x' + raw + 'y"}\n')
        assert raw not in text and f"\\u{ord(raw):04x}" in text
    assert json_defused('{"a": "##[error]"}') == '{"a": "##\\u005b' + 'error]"}'
    assert json_defused('{"a": "fine\\n"}\n\t') == '{"a": "fine\\n"}\n\t'


@pytest.mark.parametrize(
    "acting",
    [*map(chr, range(0x20)), "\x7f", "\x85", "\x9f", "\u2028", "\u2029", "\u202e", "\u2066", "\ud800", "##["],
)
def test_visible_strings_quick_test_never_passes_what_the_walk_escapes(acting: str) -> None:
    # the quick test (msgspec's JSON of the report) lets a report through unwalked only when the walk would
    # return it unchanged: one character that acts, anywhere (a name, a dict key, a message), and it walks
    clean = _rich_report()
    result = clean.results[0]
    assert result.verdict is not None and visible_strings(clean) is clean
    prose = "a" + acting + "b"
    summary = dataclasses.replace(result, verdict=dataclasses.replace(result.verdict, summary=prose))
    for changed, kept in (
        (dataclasses.replace(result, name=prose), False),
        (dataclasses.replace(result, variants={**result.variants, prose: result.variants["plain"]}), False),
        (summary, acting in ("\n", "\r")),  # a sentence keeps its own line breaks
    ):
        report = dataclasses.replace(clean, results=(changed,))
        assert (visible_strings(report) is report) == kept


def test_visible_strings_walks_records_and_returns_the_same_object_when_clean(hostile: Report) -> None:
    clean = _rich_report()
    assert visible_strings(clean) is clean
    shown = visible_strings(hostile)
    assert shown.results[0].name == visible(hostile.results[0].name)
    assert shown.results[0].variants["donated"].copies[0].source == visible(
        hostile.results[0].variants["donated"].copies[0].source or ""
    )
    # a message keeps its own line breaks (the formats write them their way), nothing else that acts
    message = hostile.chains[0].steps[1].handoffs[0].message
    assert shown.chains[0].steps[1].handoffs[0].message == visible(message, prose=True) != visible(message)
    assert "\n::error" in visible(message, prose=True) and "\\x1b" in visible(message, prose=True)


# ---------------------------------------------------------------------------------------------------------
# Every renderer


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200, 1000])
@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("color", [False, True])
def test_the_table_shows_hostile_names_at_every_width(hostile: Report, width: int, verbose: bool, color: bool) -> None:
    text = _table(hostile, width=width, verbose=verbose, color=color)
    assert_shown_not_obeyed(text, color=color)
    if width == 1000 and not color:
        # the name is shown, escaped, not obeyed: its markup and emoji code stay as typed
        assert visible(NAME) in text and "[bold]x[/bold]" in text and ":warning:" in text
        if verbose:  # a leaf's path in the copies table (a plain string cell) too
            assert visible(NAME) + "u" in text
    if color:
        assert "\x1b[31mRED" not in text


def test_the_table_stacks_and_stays_safe(hostile: Report) -> None:
    """The stacked (narrow) summary, and the wide one, each at its width."""
    wide = make_report((make_result(NAME[:20]),))
    for report in (hostile, wide):
        for width in (50, 300):
            assert_shown_not_obeyed(_table(report, width=width))


@pytest.mark.parametrize("name", ["github", "markdown", "html", "json"])
@pytest.mark.parametrize("verbose", [False, True])
def test_every_other_format_shows_hostile_names(hostile: Report, name: str, verbose: bool) -> None:
    text = RENDERERS[name].render(hostile, RenderOptions(verbose=verbose))
    assert_shown_not_obeyed(text, github=name == "github")
    if name == "json":  # the document keeps the text exactly
        back = Report.from_dict(json.loads(text))
        assert back.results[0].name == hostile.results[0].name
        assert back.chains[0].first_break == hostile.chains[0].first_break
    elif name == "github":
        titles = " ".join(c.properties.get("title", "") for c in commands(text))
        assert visible(NAME) in titles  # the name is in the annotations, as text
    else:
        assert "\\x1b" in text and "\\udcff" in text


@pytest.mark.parametrize("name", sorted(COMPARE_RENDERERS))
def test_compare_shows_hostile_names(hostile: Report, name: str) -> None:
    other = dataclasses.replace(hostile, backend=NAME + "gpu", baseline=None)
    comparison = compare_reports([(NAME + "a.json", hostile), (NAME + "b.json", other)])
    for options in (RenderOptions(), RenderOptions(verbose=True, width=60), RenderOptions(color=True)):
        text = COMPARE_RENDERERS[name].render(comparison, options)
        assert_shown_not_obeyed(text, color=options.color)
        if name == "json":
            assert json.loads(text) == json.loads(json.dumps(comparison.to_dict()))  # every string exactly


def test_the_baseline_round_trips_a_hostile_name_and_its_summary_is_safe(hostile: Report, tmp_path: Path) -> None:
    path = tmp_path / (visible(NAME[:12]).replace("\\", "_") + ".json")
    ok = tuple(dataclasses.replace(r, checks=()) for r in hostile.results if r.status == "ok")
    passing = dataclasses.replace(hostile, results=ok, chains=(), baseline=None)  # a baseline records a pass
    saved = save_baseline(path, passing)
    assert_shown_not_obeyed(render_saved(saved))
    assert "\\udcff" in path.read_text()  # JSON's escape
    loaded = load_baseline(path)
    names = {entry.name for entry in loaded.entries}
    assert hostile.results[0].name in names  # read back exactly, lone surrogate and all
    again = save_baseline(path, passing)  # a save reads the file first: it must read what it wrote
    assert_shown_not_obeyed(render_saved(again))
    assert_shown_not_obeyed(render_comparison(hostile.baseline))  # type: ignore[arg-type]
    from fieldmem.gate.baseline import compare_to_baseline

    gated = compare_to_baseline(passing, loaded)
    assert gated.baseline is not None
    for renderer in ("table", "markdown", "github"):
        assert_shown_not_obeyed(RENDERERS[renderer].render(gated, RenderOptions()), github=renderer == "github")


def test_the_apis_failure_message_is_safe(hostile: Report) -> None:
    """What ``assert_in_place`` raises (and pytest prints in the CI log) names the failed checks, then the table."""
    from fieldmem.frontends.api import failure_message

    text = failure_message(hostile)
    assert_shown_not_obeyed(text)
    assert text.startswith(visible(NAME))


def test_the_stderr_error_lines_are_one_safe_line(hostile: Report, capsys: pytest.CaptureFixture[str]) -> None:
    from fieldmem.frontends.output import _print_errors

    _print_errors([hostile, hostile])
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and all(line.startswith("fieldmem: error: ") for line in err.splitlines())
    assert_shown_not_obeyed(err)


# ---------------------------------------------------------------------------------------------------------
# The command line, as CI runs it


MODULE = f"""\
import jax.numpy as jnp
import fieldmem


def update(x):
    return x + 1


fieldmem.case(update, args=lambda: (jnp.zeros((256,), jnp.float32),), name={NAME!r})
"""


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, COLUMNS="100", TMPDIR=str(tmp), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.update(FIELDMEM_CACHE_DIR="none", PYTHONIOENCODING="utf-8")  # strict: a lone surrogate raised here
    env.pop("FORCE_COLOR", None)
    env.pop("XLA_FLAGS", None)
    env.update(extra)
    return env


def _fieldmem(tmp_path: Path, *args: str | bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args],
        capture_output=True,
        cwd=tmp_path,
        env=_env(temp, **env),
        timeout=300,
    )


def _text(data: bytes, encoding: str = "utf-8") -> str:
    return data.decode(encoding)  # strict: what fieldmem wrote is valid in its stream's encoding


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fieldmem:")]


@pytest.mark.compile
def test_a_hostile_case_name_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "hostile.py").write_text(MODULE)
    table = _fieldmem(tmp_path, "hostile.py")
    out, err = _text(table.stdout), _text(table.stderr)
    assert table.returncode == 0, err
    assert "Traceback" not in err
    assert_shown_not_obeyed(out)
    assert visible(NAME)[:60] in out.replace("\n", "")
    github = _fieldmem(tmp_path, "hostile.py", "--format", "github", "--save-baseline", "base.json")
    assert github.returncode == 0 and "Traceback" not in _text(github.stderr), _text(github.stderr)
    assert_shown_not_obeyed(_text(github.stdout), github=True)
    assert_shown_not_obeyed(_text(github.stderr))
    assert "saved the baseline" in _text(github.stderr)
    again = _fieldmem(tmp_path, "hostile.py", "--baseline", "base.json", "--format", "markdown")
    assert again.returncode == 0, _text(again.stderr)
    assert_shown_not_obeyed(_text(again.stdout))
    # a stdout that cannot hold "→" (Latin-1): written as an escape, never a traceback
    latin = _fieldmem(tmp_path, "hostile.py", PYTHONIOENCODING="latin-1")
    assert latin.returncode == 0 and "Traceback" not in _text(latin.stderr, "latin-1"), latin.stderr
    assert "\\u2192" in _text(latin.stdout, "latin-1")


@pytest.mark.compile
def test_a_target_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"bad\xff.py")).write_text(MODULE.replace(repr(NAME), "'plain'"))
    for spec in (b"bad\xff.py:update", b"missing\xff.py:update", b"bad\xff.py"):
        done = _fieldmem(tmp_path, spec)
        err = _text(done.stderr)
        assert done.returncode == 2, err
        assert "Traceback" not in err
        (line,) = _error_lines(err)
        assert line.startswith("fieldmem: error: ") and "\\udcff" in line, line
        assert_shown_not_obeyed(_text(done.stdout))
    assert "0xff, which is not UTF-8" in line


@pytest.mark.compile
@pytest.mark.parametrize("where", ["import", "trace"])
def test_a_target_that_closes_the_workers_descriptors_is_its_error(tmp_path: Path, where: str) -> None:
    closing = "os.closerange(3, 4096)"
    module = f"""\
import os
import jax.numpy as jnp
import fieldmem

{closing if where == "import" else ""}

def update(x):
    {closing if where == "trace" else ""}
    return x + 1


def fine(x):
    return x * 2


fieldmem.case(update, args=lambda: (jnp.zeros((256,), jnp.float32),))
"""
    (tmp_path / "closes.py").write_text(module)
    (tmp_path / "fine.py").write_text(
        "import jax.numpy as jnp\nimport fieldmem\n\n\ndef fine(x):\n    return x * 2\n\n\n"
        "fieldmem.case(fine, args=lambda: (jnp.zeros((256,), jnp.float32),))\n"
    )
    done = _fieldmem(tmp_path, "closes.py", "fine.py", "-f", "json")
    err = _text(done.stderr)
    assert done.returncode == 2, err  # a target that could not be checked (docs/guarantees.md, exit codes)
    assert "Traceback" not in err and "Errno" not in err, err
    (line,) = _error_lines(err)
    assert "lost its pipe to fieldmem" in line and "os.closerange" in line, line
    report = json.loads(done.stdout)
    statuses = {r["target"]: r["status"] for r in report["results"]}
    assert statuses == {"closes.py": "error", "fine.py": "ok"}, statuses
