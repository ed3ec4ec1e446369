"""The bundled examples, checked against jax itself (real compiles and runs).

For every case registered in ``examples/*.py`` the report's memory figures
must equal ``memory_analysis()`` of the same program compiled here with
plain ``jax.jit``, and every alias the report claims must happen at run time:
the output leaf's buffer is the donated input's buffer, and the input is
deleted. The examples are at most a few tens of MiB, so they run as they are.
"""

from __future__ import annotations

import html
import inspect
import json
import re
from pathlib import Path
from typing import Any

import jax
import pytest
from test_peaks_truth import assert_adds_up

from fieldmem.driver import FAST_COMPILE_UNAVAILABLE
from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import Target, TargetOptions, resolve_target

from helpers_compile import compile_quietly, constant_bytes, materialize, run_and_check_aliases, xla_memory

pytestmark = pytest.mark.compile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# How each registered case is jitted, written out independently of fieldmem:
# donated argument numbers and static argument numbers; "jit": the target is
# a jax.jit object and its own donation is the donated variant.
JIT_OF: dict[str, Any] = {
    "field:update": {"donate_argnums": (0, 1), "static_argnums": ()},
    "sparse_row:set_row": {"donate_argnums": (0,), "static_argnums": ()},
    "sparse_row:write_kv": {"donate_argnums": (0,), "static_argnums": ()},
    "stencil_scan:diffuse": {"donate_argnums": (0,), "static_argnums": (1,)},
    "optimizer:sgd_step": "jit",
    "advisor:adam_step": {"donate_argnums": (0, 1, 2), "static_argnums": ()},
    "forward:jit": {"donate_argnums": (0,), "static_argnums": ()},
    "sharded:relax": {"donate_argnums": (0,), "static_argnums": ()},
    "interior:add_interior": {"donate_argnums": (0,), "static_argnums": ()},
    "train_step:train_step": "jit",
}


def _line_of(path: Path, text: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


@pytest.fixture(scope="module")
def example_targets() -> dict[str, Any]:
    targets = {}
    for file in sorted(EXAMPLES.glob("*.py")):
        for target in resolve_target(str(file), TargetOptions()):
            if isinstance(target, Target):  # chains: tests/findings/test_chains.py
                targets[target.name] = target
    return targets


@pytest.fixture(scope="module")
def example_report(example_targets: dict[str, Any]) -> Any:
    return check_targets(list(example_targets.values()), CheckOptions(min_bytes=1024))


@pytest.fixture(scope="module")
def example_results(example_report: Any) -> dict[str, Any]:
    return {result.name: result for result in example_report.results}


def test_every_example_case_is_covered(example_targets: dict[str, Any]) -> None:
    assert set(example_targets) == set(JIT_OF)


@pytest.fixture(scope="module", params=sorted(JIT_OF))
def compiled_case(request: pytest.FixtureRequest, example_targets: dict[str, Any]) -> dict[str, Any]:
    """One example compiled here, plain and donated, with plain jax."""
    target = example_targets[request.param]
    args, kwargs = target.example_arguments()
    how = JIT_OF[request.param]
    if how == "jit":
        user_jit = target.function
        static = set(user_jit._jit_info.static_argnums)
        plain_jit = jax.jit(inspect.unwrap(user_jit), static_argnums=tuple(sorted(static)))
        donated_jit = user_jit
    else:
        static = set(how["static_argnums"])
        # a jit object given another donation is rebuilt from its function (a jit of
        # the jit object would nest it, which XLA may compile differently)
        function = inspect.unwrap(target.function)
        plain_jit = jax.jit(function, static_argnums=how["static_argnums"])
        donated_jit = jax.jit(function, **how)
    return {
        "name": request.param,
        "target": target,
        "args": args,
        "kwargs": kwargs,
        "static": static,
        "plain": compile_quietly(plain_jit, *args, **kwargs),
        "donated": compile_quietly(donated_jit, *args, **kwargs),
    }


def test_memory_figures_are_xla_verbatim(compiled_case: dict[str, Any], example_results: dict[str, Any]) -> None:
    result = example_results[compiled_case["name"]]
    assert result.status == "ok", result.error
    for variant in ("plain", "donated"):
        expected = xla_memory(compiled_case[variant])
        memory = result.variants[variant].memory
        for name, value in expected.items():
            assert getattr(memory, name) == value, (variant, name)
        assert memory.footprint_bytes == (
            expected["argument_bytes"]
            + expected["output_bytes"]
            + expected["temp_bytes"]
            - expected["alias_bytes"]
            + constant_bytes(compiled_case[variant])
        )
        assert memory.unavailable == FAST_COMPILE_UNAVAILABLE  # a static check compiles at -O0
    for name, saved in result.savings.items():
        plain = getattr(result.variants["plain"].memory, name)
        donated = getattr(result.variants["donated"].memory, name)
        assert saved == (None if plain is None or donated is None else plain - donated), name


def test_claimed_aliases_happen_at_run_time(compiled_case: dict[str, Any], example_results: dict[str, Any]) -> None:
    result = example_results[compiled_case["name"]]
    target = compiled_case["target"]
    # fresh arguments: the donated call deletes them
    args, kwargs = target.example_arguments()
    args, kwargs = materialize(args), materialize(kwargs)
    function = inspect.unwrap(target.function)
    names = list(inspect.signature(function).parameters)[: len(args)]
    run_and_check_aliases(compiled_case["donated"], result, args, kwargs, names, compiled_case["static"])
    # the aliased bytes add up to XLA's own alias figure (one device here)
    donated = result.variants["donated"]
    assert sum(a.bytes for a in donated.aliases) == donated.memory.alias_bytes


def test_sparse_row_plain_copies_u_at_the_update_line(example_results: dict[str, Any]) -> None:
    result = example_results["sparse_row:set_row"]
    line = _line_of(EXAMPLES / "sparse_row.py", "return u.at[idx].set(row)")
    copies = [c for c in result.variants["plain"].copies if c.kind == "parameter"]
    assert len(copies) == 1
    copy = copies[0]
    assert copy.of_parameter == "u" and copy.input_index == 0
    assert copy.bytes == 4096 * 1024 * 4
    assert copy.source is not None and copy.source.endswith(f"sparse_row.py:{line}")
    # with donation the copy is gone and u is reused
    donated = result.variants["donated"]
    assert not [c for c in donated.copies if c.kind == "parameter"]
    assert [(a.input, a.output) for a in donated.aliases] == [("u", "out")]
    assert result.verdict.in_place
    assert result.savings["peak_bytes"] == copy.bytes


def test_field_example_aliases_both_fields_and_copies_v_without_donation(example_results: dict[str, Any]) -> None:
    result = example_results["field:update"]
    donated = result.variants["donated"]
    assert [(a.input, a.input_index, a.output, a.output_index) for a in donated.aliases] == [
        ("field.u", 0, "out.u", 0),
        ("field.v", 1, "out.v", 1),
    ]
    assert all(a.bytes == 512 * 512 * 4 for a in donated.aliases)
    plain = result.variants["plain"]
    v_copies = [c for c in plain.copies if c.of_parameter == "field.v"]
    assert len(v_copies) == 1
    assert v_copies[0].kind == "parameter" and v_copies[0].output == "out.v"
    assert v_copies[0].bytes == 512 * 512 * 4
    assert not plain.aliases
    assert result.verdict.in_place
    assert result.savings["alias_bytes"] == -2 * 512 * 512 * 4
    assert result.savings["footprint_bytes"] is not None and result.savings["footprint_bytes"] > 0
    assert [c.name for c in result.checks] == ["expect-in-place"] and result.checks[0].passed


def test_field_verdict_names_the_copied_field_and_line() -> None:
    """Donating only ``f``: field.v is copied in the donated variant, and the verdict says where."""
    target = resolve_target(str(EXAMPLES / "field.py"), TargetOptions(donate=DonateSpec.parse("f")))[0]
    result = check_targets([target], CheckOptions(min_bytes=1024)).results[0]
    assert result.status == "ok", result.error
    assert not result.verdict.in_place
    line = _line_of(EXAMPLES / "field.py", "def update(field, f)")
    copy_findings = [f for f in result.verdict.findings if f.code == "parameter-copy"]
    assert len(copy_findings) == 1
    message = copy_findings[0].message
    assert message.startswith("field.v is not donated and is copied")
    assert f"field.py:{line}" in message and "donate it or stop returning it" in message
    assert copy_findings[0].input == "field.v" and copy_findings[0].output == "out.v"
    new_buffers = {f.output: f.message for f in result.verdict.findings if f.code == "new-buffer"}
    assert set(new_buffers) == {"out.u", "out.v"}
    assert "donate field" in new_buffers["out.u"]
    assert result.checks[0].name == "expect-in-place" and not result.checks[0].passed


def test_stencil_scan_reports_the_loop_copy(example_results: dict[str, Any]) -> None:
    result = example_results["stencil_scan:diffuse"]
    loops = [c for c in result.variants["donated"].copies if c.kind == "loop" and c.bytes >= 1024]
    assert loops
    assert all(c.trip_count == 40 and c.bytes_per_call == 40 * c.bytes for c in loops)
    assert not result.verdict.in_place
    assert "every iteration (x40" in result.verdict.summary


def test_live_peak_is_at_most_the_footprint_on_every_example(example_results: dict[str, Any]) -> None:
    for name, result in example_results.items():
        for variant in result.variants.values():
            memory = variant.memory
            assert memory.live_peak_bytes is not None, (name, memory.unavailable)
            assert 0 < memory.live_peak_bytes <= memory.footprint_bytes, (name, variant.name)
            sizes = [b.bytes for b in variant.live_at_peak]
            assert sizes == sorted(sizes, reverse=True), (name, variant.name)


def test_every_byte_at_the_live_peak_has_a_source_on_every_example(example_results: dict[str, Any]) -> None:
    """The peak by source adds up to the live peak, by source and by line, and no temporary or output of
    a KiB or more is left without a line of the example (issue 31; gpu:h100 and tpu:v5e in
    tests/findings/test_peak_sources.py)."""
    for name, result in example_results.items():
        for variant in result.variants.values():
            assert_adds_up(variant)
            for source in variant.peak.sources:
                if source.kind in ("temporary", "output") and source.bytes >= 1024:
                    assert source.line and "examples/" in source.line, (name, variant.name, source)
                if source.kind == "argument":
                    assert source.input, (name, source)


@pytest.mark.parametrize(
    ("name", "file", "field", "needle", "saved"),
    [
        # the sparse update copies u whole before writing one row; donation removes that copy
        ("sparse_row:set_row", "sparse_row.py", "u", "return u.at[idx].set(row)", 4096 * 1024 * 4),
        # the Field update copies v (returned unchanged; XLA keeps no line for it, so the def); donation
        # removes that copy and u's new buffer
        ("field:update", "field.py", "field.v", "def update(field, f):", 2 * 512 * 512 * 4),
    ],
)
def test_live_set_at_the_plain_peak_names_the_copied_input(
    example_results: dict[str, Any], name: str, file: str, field: str, needle: str, saved: int
) -> None:
    result = example_results[name]
    plain, donated = result.variants["plain"], result.variants["donated"]
    line = _line_of(EXAMPLES / file, needle)
    copied = [b for b in plain.live_at_peak if b.instruction and b.instruction.startswith("copy")]
    assert copied and copied[0].input == field
    assert copied[0].source is not None and copied[0].source.endswith(f"{file}:{line}")
    assert plain.memory.live_peak_bytes - donated.memory.live_peak_bytes == saved


def test_field_example_live_peak_drops_by_both_fields_with_donation(example_results: dict[str, Any]) -> None:
    result = example_results["field:update"]
    plain, donated = result.variants["plain"], result.variants["donated"]
    field_bytes = 512 * 512 * 4
    assert plain.memory.live_peak_bytes - donated.memory.live_peak_bytes == 2 * field_bytes
    # both fields' buffers: field.v itself, and field.u's holding the new u written into it
    assert {b.input or b.buffer_of for b in donated.live_at_peak if b.kind == "aliased"} == {"field.u", "field.v"}


def test_python_api_check_returns_the_report() -> None:
    import fieldmem

    report = fieldmem.check(str(EXAMPLES / "field.py"))
    assert [r.name for r in report.results] == ["field:update"]
    assert report.results[0].verdict is not None and report.results[0].verdict.in_place
    assert report.exit_code == 0


def test_arguments_live_at_the_peak_point_at_the_function(example_results: dict[str, Any]) -> None:
    """XLA keeps no line for a parameter (or for the tuple of outputs): the function's def stands in."""
    result = example_results["field:update"]
    line = _line_of(EXAMPLES / "field.py", "def update(field, f)")
    update = _line_of(EXAMPLES / "field.py", "field.u.at[:].add(f)")
    for variant in result.variants.values():
        arguments = [b for b in variant.live_at_peak if b.input is not None and b.kind in ("parameter", "aliased")]
        assert arguments, variant.name
        for buffer in arguments:
            # a donated input read for the last time: its buffer then holds the new u,
            # written where the update is (XLA's live range of a donated parameter ends there)
            written = buffer.kind == "aliased" and buffer.instruction is not None and "fusion" in buffer.instruction
            where = update if written else line
            assert buffer.source is not None and buffer.source.endswith(f"field.py:{where}"), (variant.name, buffer)
        # both peaks are where the outputs are gathered (the root tuple)
        assert variant.timeline is not None and variant.timeline.peak_instruction.startswith("tuple")
        assert variant.timeline.peak_source is not None and variant.timeline.peak_source.endswith(f"field.py:{line}")


def test_every_headline_names_the_largest_finding(example_results: dict[str, Any]) -> None:
    """The verdict of each bundled example leads with the finding that costs the most memory, and its
    findings are listed breaks first, each kind by the bytes at stake."""
    from fieldmem.findings.verdict import rank

    order = {"error": 0, "warning": 1, "info": 2}
    for name, result in example_results.items():
        verdict = result.verdict
        assert verdict is not None, name
        assert verdict.findings == rank(verdict.findings), name
        keys = [(order[f.severity], -(f.bytes if f.bytes is not None else -1)) for f in verdict.findings]
        assert keys == sorted(keys), name
        errors = [f for f in verdict.findings if f.severity == "error"]
        if errors:
            largest = max(errors, key=lambda f: f.bytes or 0)
            assert verdict.summary.startswith(f"not in place: {largest.message}"), (name, verdict.summary)
            assert largest.bytes is not None, (name, largest)
        else:
            assert verdict.kind in ("in-place", "in-place-as-written", "nothing-to-update"), name
        if verdict.kind == "in-place-as-written":
            # headed by the largest copy the compiler chose, never by a note
            chosen = max((f for f in verdict.findings if f.code == "compiler-copy"), key=lambda f: f.bytes or 0)
            assert verdict.summary.startswith(f"in place as written; {chosen.message}"), (name, verdict.summary)


_VERDICT_WORDS = {
    "in-place": "in place",
    "in-place-as-written": "in place as written",
    "not-in-place": "not in place",
    "nothing-to-update": "nothing to update",
}
_ANY_VERDICT = re.compile(r"\b(not in place|nothing to update|in place as written|in place)\b")


@pytest.mark.parametrize("width", [80, 120])
def test_no_format_contradicts_the_verdict(example_report: Any, width: int) -> None:
    """Every format says, for every bundled example, the verdict the rule decided, and nothing else: the
    table's row (wide at 120 columns, stacked at 80) and its headline, the Markdown row, the GitHub summary
    group, the HTML section and the JSON, with the expect-in-place check agreeing."""
    from fieldmem.findings.verdict import expectation_met
    from fieldmem.render import RenderOptions, get_renderer

    report = example_report
    results = report.results
    options = RenderOptions(min_bytes=1024, width=width)
    table = get_renderer("table").render(report, options).splitlines()
    markdown = get_renderer("markdown").render(report, options).splitlines()
    github = get_renderer("github").render(report, options)
    html_page = get_renderer("html").render(report, options)
    data = json.loads(get_renderer("json").render(report, options))
    for result in results:
        kind = result.verdict.kind
        words = _VERDICT_WORDS[kind]
        # the table's row: the first verdict words after the name are this verdict's
        row = next(line for line in table if line.startswith(result.name + " "))
        assert _ANY_VERDICT.search(row[len(result.name) :]).group(1) == words, (width, row)
        # its headline opens the details, in the same words
        header = table.index(next(line for line in table if line.startswith(f"{result.name}  (")))
        assert table[header + 1].strip().startswith(words), table[header + 1]
        assert result.verdict.summary.startswith(words)
        for check in result.checks:
            if check.name == "expect-in-place":
                assert check.passed == expectation_met(kind, "in-place")
                assert any(
                    line.strip().startswith(("✓" if check.passed else "✗") + " expect-in-place") for line in table
                )
        # Markdown: the verdict cell of its row
        md_row = next(line for line in markdown if line.startswith(f"| `{result.name}` |"))
        assert _ANY_VERDICT.search(md_row.split("|")[2]).group(1) == words, md_row
        # GitHub: the summary puts it in its verdict's group
        group = {
            "in-place": "in place",
            "in-place-as-written": "in place as written",
            "not-in-place": "not in place",
            "nothing-to-update": "with nothing to update",
        }[kind]
        assert re.search(rf"\d+ {group} \([^)]*\b{re.escape(result.name)}\b", github), (result.name, github[:400])
        # HTML: its section's class
        css = {
            "in-place": "in-place",
            "in-place-as-written": "in-place",
            "not-in-place": "not-in-place",
            "nothing-to-update": "nothing-to-update",
        }[kind]
        found = re.search(
            r'<details class="target ([^"]*)" id="[^"]*" data-filter="'
            + re.escape(html.escape(result.name.lower()))
            + " ",
            html_page,
        )
        assert found is not None and found.group(1).split()[0] == css, result.name
        # JSON: the kind and in_place agree
        (entry,) = [r for r in data["results"] if r["name"] == result.name]
        assert entry["verdict"]["kind"] == kind
        assert entry["verdict"]["in_place"] == (kind in ("in-place", "in-place-as-written"))


def _finding_order(text: str, findings: Any) -> list[int]:
    """Where each finding's message starts in ``text`` (its first 60 characters, as the format escapes them),
    in the verdict's order; -1 for one the text does not show."""
    return [text.find(f.message[:60]) for f in findings]


def _row_start(lines: list[str], name: str) -> str:
    """The line of a side-by-side table where target ``name``'s row starts: its first cell is the name, or the
    name's first part when the column folds it (the rest on the next lines)."""
    for n, line in enumerate(lines):
        head = line.split("  ")[0].strip()
        if not head or not name.startswith(head):
            continue
        folded = head
        for after in lines[n + 1 :]:
            if len(folded) >= len(name) or not after.startswith("  ") or after.split("  ")[1:2] == [""]:
                break
            folded += after.strip().split("  ")[0]
        if folded == name:
            return line
    raise AssertionError(f"{name}: no row in the table")


@pytest.mark.parametrize("width", [80, 120])
def test_verbose_and_compare_say_the_same_verdict_in_the_same_order(example_report: Any, width: int) -> None:
    """``-v`` lists every finding in the verdict's order, under the same verdict words; ``fieldmem compare`` of
    the report with itself gives each target its verdict's words, in the table and in its JSON."""
    from fieldmem.gate.compare import compare_reports
    from fieldmem.render import RenderOptions, get_renderer
    from fieldmem.render.compare import get_compare_renderer

    options = RenderOptions(min_bytes=1024, width=width, verbose=True)
    verbose = get_renderer("table").render(example_report, options)
    markdown = get_renderer("markdown").render(example_report, options)
    comparison = compare_reports([("a.json", example_report), ("b.json", example_report)])
    compared = get_compare_renderer("table").render(comparison, RenderOptions(width=width))
    compared_json = json.loads(get_compare_renderer("json").render(comparison, RenderOptions(width=width)))
    unwrapped = " ".join(line.strip() for line in verbose.splitlines())
    found = 0
    for result in example_report.results:
        words = _VERDICT_WORDS[result.verdict.kind]
        start = unwrapped.index(f"{result.name}  (")
        section = unwrapped[start:]
        assert section[section.index(")") + 1 :].strip().startswith(words), result.name
        # every finding of at least --min-bytes is listed, in the verdict's order, in -v and in Markdown
        shown = [f for f in result.verdict.findings if f.severity != "info" and (f.bytes or 0) >= 1024]
        positions = _finding_order(section, shown)
        assert -1 not in positions and positions == sorted(positions), (result.name, positions)
        found += len(positions)
        md_positions = [p for p in _finding_order(markdown[markdown.index(f"`{result.name}`") :], shown) if p >= 0]
        assert md_positions == sorted(md_positions), (result.name, md_positions)
        # compare: the verdict row of this target, in the table and the JSON
        row = next(r for r in compared_json["rows"] if r["name"] == result.name)
        assert all(cell["kind"] == result.verdict.kind for cell in row["cells"]), row
        line = _row_start(compared.splitlines(), result.name)
        block = compared[compared.index(line) :]
        lines = block.splitlines()
        at = next(n for n, line in enumerate(lines) if "verdict" in line)
        verdict_line = lines[at]
        shown = _ANY_VERDICT.search(verdict_line.split("verdict", 1)[1]).group(1)
        if shown != words:  # a narrow column folds the words onto the next line ("in place as" / "written")
            parts = words.split(" ")
            assert words.startswith(shown) and any(
                " ".join(parts[:k]) in verdict_line and " ".join(parts[k:]) in lines[at + 1]
                for k in range(1, len(parts))
            ), lines[at : at + 2]
    assert found >= 5  # the examples have findings to order
