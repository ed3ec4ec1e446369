"""Issue 19, the crash/traceback/hang items: hostile or careless input gives one bounded line and exit 2.

Each test names the item it covers; each failed on the main branch before
these fixes (a traceback, exit 1 or 134, a hang, a confident wrong message).
Inputs that would abort the process (an array XLA cannot size) run in a
subprocess, so that the test fails, rather than the test session dying, where
the fix is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.gate.baseline import BaselineError, load_baseline, save_baseline
from fieldmem.gate.compare import load_report
from fieldmem.model.codec import decode
from fieldmem.model.errors import FieldmemError, OptionError, TargetError
from fieldmem.model.units import format_bytes
from fieldmem.request.build import CheckFlags, build_request
from fieldmem.request.config import Config, ConfigError, load_config
from fieldmem.request.target import TargetOptions, resolve_target
from fieldmem.xla import buffers, hlo

from factories import make_report, make_result

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parents[1] / "golden"
FUZZ = Path(__file__).parents[1] / "golden_fuzz"

MODULE = """\
import jax
import jax.numpy as jnp
import fieldmem


def update(x):
    return x + 1


def other(x):
    return x * 2


def small():
    return (jnp.zeros((8,), jnp.float32),)


def huge():
    return (jax.ShapeDtypeStruct((4611686018427387904,), jnp.float32),)


fieldmem.case(update, args=huge, name="mod:huge")
fieldmem.case(other, args=small, name="mod:small")
"""


def check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120"})


def one_error_line(result: Any, *expected: str) -> str:
    """Exit 2, no traceback, one ``fieldmem: error:`` line on stderr holding each of ``expected``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # jax's own start-up lines (absl, the CUDA plugin) are not fieldmem's: the integrator quiets them
    lines = _fieldmem_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("fieldmem: error: "), result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FIELDMEM_CACHE_DIR="none", JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


def _subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(),
        timeout=300,
    )


def _fieldmem_lines(stderr: str) -> list[str]:
    """fieldmem's own lines of stderr (jax's absl and plugin lines left out)."""
    return [line for line in stderr.splitlines() if line.startswith("fieldmem:")]


# ---- item 6: out of memory while making the --run arguments ----------------------------------

PIB_SHAPES = "f32[281474976710656]"  # 1 PiB: no machine gives it, the allocation fails at once


@pytest.mark.compile
def test_out_of_memory_making_run_arguments_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mod.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    result = check("mod.py:other", "--shapes", PIB_SHAPES, "--run", "--no-isolate")
    line = one_error_line(result, "mod.py:other (mod:small): out of memory making the arguments of the donated variant")
    assert "internal error" not in line and "fieldmem bug" not in line


@pytest.mark.compile
def test_out_of_memory_making_run_arguments_in_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mod.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    result = check("mod.py:other", "--shapes", PIB_SHAPES, "--run", "-f", "json")
    line = one_error_line(result, "out of memory making the arguments of the donated variant")
    assert "internal error" not in line
    (target,) = json.loads(result.stdout)["results"]
    assert target["error"]["kind"] == "out-of-memory", target


@pytest.mark.compile
def test_a_memory_error_in_a_callback_is_reported_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # item 13: the cause used to be cut off after "Traceback (most recent call last):"
    (tmp_path / "cb.py").write_text(
        "import jax, jax.numpy as jnp\n"
        "def host(x):\n"
        "    raise MemoryError('cannot allocate 1 PiB on the host')\n"
        "def update(x):\n"
        "    return x + jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)\n"
        "def make():\n"
        "    return (jnp.zeros((8,), jnp.float32),)\n"
    )
    monkeypatch.chdir(tmp_path)
    result = check("cb.py:update", "--args", "make", "--run", "--no-isolate")
    line = one_error_line(result, "MemoryError: cannot allocate 1 PiB on the host")
    assert "Traceback" not in line


# ---- item 7: sizes XLA cannot hold ------------------------------------------------------------


@pytest.mark.compile
def test_an_array_of_2_63_bytes_from_a_factory_is_that_targets_error(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(MODULE)
    done = _subprocess(["mod.py", "-f", "json"], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    results = {r["name"]: r for r in json.loads(done.stdout)["results"]}
    assert results["mod:small"]["status"] == "ok"  # the other target is still checked and reported
    assert results["mod:huge"]["status"] == "error"
    assert "XLA cannot hold an array of 2**63 bytes or more" in results["mod:huge"]["error"]["message"]
    assert _fieldmem_lines(done.stderr) == [
        f"fieldmem: error: mod.py (mod:huge): {results['mod:huge']['error']['message']}"
    ]


@pytest.mark.compile
def test_shapes_of_2_63_bytes_are_refused_before_xla_sees_them(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(MODULE)
    done = _subprocess(["mod.py:update", "mod.py:other", "--shapes", "f32[4611686018427387904]"], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = _fieldmem_lines(done.stderr)
    assert len(lines) == 2 and all("argument 'x' (float32[4611686018427387904])" in line for line in lines), lines
    assert "mod:huge" in done.stdout and "mod:small" in done.stdout  # the table is printed


def test_prepare_call_refuses_sizes_and_dimensions_past_int64() -> None:
    import jax
    import jax.numpy as jnp

    from fieldmem.driver import prepare_call
    from fieldmem.model.errors import ArgumentsError
    from fieldmem.request.spec import DonateSpec, StaticSpec

    def update(state: Any) -> Any:
        return state

    def prepare(*args: Any, **kwargs: Any) -> Any:
        return prepare_call(update, args, kwargs, donate=DonateSpec(), static=StaticSpec())

    fits = jax.ShapeDtypeStruct((2**61 - 1,), jnp.float32)  # 2**63 - 4 bytes: XLA sizes it
    prepare(fits)
    with pytest.raises(ArgumentsError, match=r"argument 'state'\['w'\] \(float32\[2305843009213693952\]\)"):
        prepare({"w": jax.ShapeDtypeStruct((2**61,), jnp.float32)})
    with pytest.raises(ArgumentsError, match="has the dimension 9223372036854775808"):
        prepare(jax.ShapeDtypeStruct((2**63, 1), jnp.int8))
    with pytest.raises(ArgumentsError, match="keyword argument 'state'"):
        prepare(state=jax.ShapeDtypeStruct((2**40, 2**40), jnp.bfloat16))


def test_a_dimension_past_int64_says_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # item 13: was "tracing/lowering failed: TypeError: get(): incompatible function arguments..."
    (tmp_path / "mod.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    result = check("mod.py:other", "--shapes", "f32[9223372036854775808]")
    line = one_error_line(result, "has the dimension 9223372036854775808: XLA's dimensions are 0 to 2**63 - 1")
    assert "incompatible function arguments" not in line


# ---- item 8: --timeout and --devices -------------------------------------------------------------


def _build(**flags: Any) -> Any:
    flags.setdefault("targets", ("mod.py:update",))
    return build_request(CheckFlags(**flags), Config())


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0, 0.0])
def test_a_timeout_that_never_fires_is_refused(timeout: float) -> None:
    with pytest.raises(OptionError, match="must be positive: a number of seconds"):
        _build(run=True, timeout=timeout)


def test_timeout_without_worker_processes_is_refused() -> None:
    # it was accepted and ignored: a hanging target hung the run forever
    with pytest.raises(OptionError, match="--timeout needs the worker processes of --run"):
        _build(run=True, isolate=False, timeout=5.0)
    result = check("mod.py:update", "--run", "--no-isolate", "--timeout", "5")
    one_error_line(result, "drop --no-isolate or --timeout")


def test_devices_are_bounded() -> None:
    from fieldmem.request.options import MAX_DEVICES

    assert _build(devices=MAX_DEVICES).devices == MAX_DEVICES
    result = check("mod.py:update", "--devices", "100000")
    one_error_line(result, f"--devices 100000 is more than {MAX_DEVICES}, the most fieldmem simulates")


# ---- item 9: tracebacks on deep, huge or broken documents ----------------------------------------


@pytest.fixture
def baseline_file(tmp_path: Path) -> Path:
    path = tmp_path / "baseline.json"
    save_baseline(path, make_report((make_result(),)))
    return path


def _rewrite(path: Path, change: Any) -> Path:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return path


def test_json_nested_100000_levels(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BaselineError, match="nested too deeply"):
        load_baseline(deep)
    one_error_line(check("mod.py:update", "--baseline", str(deep)), "'" + str(deep) + "' is nested too deeply")
    compared = runner.invoke(app, ["compare", str(deep), str(deep)])
    one_error_line(compared, "report", "is nested too deeply")
    with pytest.raises(FieldmemError):
        load_report(deep)


def test_a_number_past_the_digit_limit(tmp_path: Path) -> None:
    document = tmp_path / "digits.json"
    document.write_text('{"schema": ' + "1" * 5000 + "}")
    one_error_line(check("mod.py:update", "--baseline", str(document)), "cannot be read")


def test_a_size_of_10_4000_in_a_baseline(baseline_file: Path) -> None:
    def huge(document: dict[str, Any]) -> None:
        document["entries"][0]["variants"]["donated"]["memory"]["peak_bytes"] = 10**4000

    _rewrite(baseline_file, huge)
    line = one_error_line(check("mod.py:update", "--baseline", str(baseline_file)), "should be a 64-bit integer")
    assert "about 4001 digits" in line and len(line) < 400
    assert format_bytes(10**4000).startswith("about 10^")  # was OverflowError
    assert format_bytes(-(10**5000)) == "-over 10^4000 TiB"


def test_a_lone_surrogate_in_a_baseline_name(baseline_file: Path) -> None:
    """Read as written (JSON's escape: fieldmem writes one so for a case named so, issue 29) and shown as an
    escape, never written raw to a stream that cannot hold it; before, it was refused."""
    from fieldmem.gate.baseline import compare_to_baseline
    from fieldmem.render import RENDERERS, RenderOptions

    def surrogate(document: dict[str, Any]) -> None:
        document["entries"][0]["name"] += "\ud800"

    _rewrite(baseline_file, surrogate)
    assert "\\ud800" in baseline_file.read_text()
    (entry,) = load_baseline(baseline_file).entries
    assert entry.name.endswith("\ud800")
    gated = compare_to_baseline(make_report((make_result(),)), load_baseline(baseline_file))
    text = RENDERERS["table"].render(gated, RenderOptions())
    assert "\\ud800" in text and "\ud800" not in text
    text.encode("utf-8")
    assert decode(dict[str, int], {"a\udcff": 1}) == {"a\udcff": 1}


def test_a_pyproject_nested_deeply_or_not_utf8(tmp_path: Path) -> None:
    deep = tmp_path / "deep" / "pyproject.toml"
    deep.parent.mkdir()
    deep.write_text("[tool.fieldmem]\ntargets = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(deep)
    binary = tmp_path / "binary" / "pyproject.toml"
    binary.parent.mkdir()
    binary.write_bytes(b'[tool.fieldmem]\ntargets = ["\xff\xfe"]\n')
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(binary)
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(start=binary.parent)  # found upward, not named
    one_error_line(check("--config", str(binary)), "is not valid TOML")


def _nested_loop_text() -> str:
    return (GOLDEN / "hand_nested_loop.hlo").read_text()


def test_an_instruction_listing_itself_as_an_operand() -> None:
    text = (GOLDEN / "hand_tuple_param.hlo").read_text().replace("%multiply.7, %copy.6)", "%tuple.8, %copy.6)")
    with pytest.raises(hlo.HloStructureError, match=r"'tuple.8' of computation '.*' depends on itself"):
        hlo.parse_hlo_module(text)


def test_a_while_inside_its_own_body() -> None:
    text = _nested_loop_text().replace("body=%inner_body", "body=%outer_body")
    assert text != _nested_loop_text()
    with pytest.raises(hlo.HloStructureError, match="computation 'outer_body' calls itself"):
        hlo.parse_hlo_module(text)
    assert issubclass(hlo.HloStructureError, hlo.HloParseError)


def test_a_dependency_cycle_through_other_instructions() -> None:
    # the loop's init tuple reads the loop's own result: tuple.17 -> get-tuple-element.19 -> while.18 -> tuple.17
    text = _nested_loop_text().replace("tuple(%constant.16, %copy.15)", "tuple(%constant.16, %get-tuple-element.19)")
    assert text != _nested_loop_text()
    with pytest.raises(hlo.HloStructureError, match="depends on itself"):
        hlo.parse_hlo_module(text)


def test_computations_nested_past_the_limit() -> None:
    from fieldmem.xla.hlo.validate import MAX_NESTING

    lines = ["HloModule deep", ""]
    for level in range(MAX_NESTING + 5, 0, -1):
        callee = f", to_apply=%c{level + 1}" if level < MAX_NESTING + 5 else ""
        opcode = "call" if callee else "negate"
        lines += [f"%c{level} (p: f32[]) -> f32[] {{", "  %p = f32[] parameter(0)"]
        lines += [f"  ROOT %r = f32[] {opcode}(%p){callee}", "}", ""]
    lines += [
        "ENTRY %main (x: f32[]) -> f32[] {",
        "  %x = f32[] parameter(0)",
        "  ROOT %y = f32[] call(%x), to_apply=%c1",
        "}",
    ]
    with pytest.raises(hlo.HloStructureError, match=f"more than {MAX_NESTING} levels deep"):
        hlo.parse_hlo_module("\n".join(lines))


# ---- item 12: a folder as a target ------------------------------------------------------------------


@pytest.mark.compile
def test_a_folder_target_checks_every_case_of_its_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "mod.py").write_text(MODULE.replace('fieldmem.case(update, args=huge, name="mod:huge")\n', ""))
    (folder / "plain.py").write_text("import fieldmem\n\ndef helper(x):\n    return x\n")  # registers nothing
    (folder / "setup.py").write_text("raise SystemExit('setup.py must never run')\n")  # never imported
    (folder / "_private.py").write_text("import fieldmem\nraise SystemExit('never imported')\n")
    monkeypatch.chdir(tmp_path)
    result = check("models/", "-f", "json", "--min-bytes", "0")
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in json.loads(result.stdout)["results"]] == ["mod:small"]
    assert [r["target"] for r in json.loads(result.stdout)["results"]] == [os.path.join("models/", "mod.py")]


def test_a_folder_whose_modules_register_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "plain.py").write_text("import fieldmem\n")
    monkeypatch.chdir(tmp_path)
    result = check("empty/")
    one_error_line(result, "no module of folder 'empty/' registers a fieldmem.case", "empty/plain.py")
    (folder / "plain.py").unlink()
    one_error_line(check("./empty"), "folder './empty' holds no .py file that mentions fieldmem")


def test_the_readme_folder_example_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.parent.checker import resolve_all

    monkeypatch.chdir(ROOT)
    resolved = resolve_all(["examples/"], TargetOptions())
    errors = [item for item in resolved if isinstance(item, tuple)]
    assert not errors, errors
    names = {t.name for t in resolved if not isinstance(t, tuple)}
    assert {"field:update", "sparse_row:set_row", "stencil_scan:diffuse"} <= names


# ---- item 13: bounded error lines ----------------------------------------------------------------------


def test_every_error_line_is_bounded() -> None:
    from fieldmem.model.errors import MAX_LINE, listing, one_line, quoted

    huge = "x" * 200_000_000
    error = FieldmemError(f"schema {huge!r} is not known\nsecond line")
    assert len(error.message) <= MAX_LINE and "\n" not in error.message
    assert error.message.endswith(f"… ({len(repr(huge)) + len('schema  is not known second line')} characters)")
    assert len(quoted(huge)) < 200 and quoted(10**5000).startswith("an integer of about")
    names = [f"name{n}" for n in range(40_000)]
    assert listing(names).endswith(", … (40000 in all)") and len(listing(names)) < 200
    assert one_line("a\ud800b") == "a\\ud800b"  # writable to any UTF-8 stream


def test_a_huge_schema_string_is_not_echoed(tmp_path: Path) -> None:
    from fieldmem.model.errors import MAX_LINE

    document = tmp_path / "big.json"
    document.write_text(json.dumps({"schema": "s" * 5_000_000}))
    line = one_error_line(check("mod.py:update", "--baseline", str(document)))
    assert len(line) <= MAX_LINE + len("fieldmem: error: ")


def test_a_40000_name_unknown_key_is_not_echoed(tmp_path: Path) -> None:
    from fieldmem.model.errors import MAX_LINE

    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.fieldmem]\n" + "".join(f"key{n} = 1\n" for n in range(40_000)))
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert len(caught.value.message) <= MAX_LINE


# ---- item 14 (smaller) -----------------------------------------------------------------------------------


def test_a_target_with_two_colons_says_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "good.py").write_text("def upd(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TargetError, match=r"has more than one ':'.*\(good.py:upd.x\)") as caught:
        resolve_target("good.py:upd:x", TargetOptions())
    assert "is not a module name" not in caught.value.message


def test_a_bad_cache_dir_in_the_config_names_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.fieldmem]\ntargets = ["m.py:f"]\ncache-dir = "file/sub"\n')
    (tmp_path / "file").write_text("a file, not a folder")
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    line = one_error_line(check(), "cache-dir in pyproject.toml [tool.fieldmem] 'file/sub' cannot be created")
    assert "--cache-dir" not in line
    one_error_line(check("--cache-dir", "file/sub"), "--cache-dir 'file/sub' cannot be created")


def test_compare_of_50_reports_shows_every_figure(tmp_path: Path) -> None:
    from fieldmem.model.codec import encode

    report = make_report((make_result(),))
    paths = []
    for n in range(50):
        path = tmp_path / f"r{n:02d}.json"
        path.write_text(json.dumps({"schema": "fieldmem.report/1", **encode(report)}))
        paths.append(str(path))
    result = runner.invoke(app, ["compare", *paths], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    verdicts = [line for line in lines if "verdict" in line]
    assert verdicts and all("in place" in line for line in verdicts), result.stdout[:3000]
    shown = {name for line in lines for name in line.split() if name.startswith("r") and name.endswith(".json")}
    assert shown == {Path(p).name for p in paths}  # every report has a column somewhere
    assert all(len(line) <= 120 for line in lines)


def test_operands_that_name_no_instruction() -> None:
    text = _nested_loop_text().replace("while(%tuple.17)", "while(%nowhere)")
    with pytest.raises(hlo.HloStructureError, match="reads 'nowhere', which no instruction of the computation"):
        hlo.parse_hlo_module(text)


def _buffer_golden(name: str) -> tuple[bytes, bytes]:
    folder = Path(__file__).parents[1] / "golden_buffers"
    return (folder / f"{name}.buffer_assignment.pb").read_bytes(), (folder / f"{name}.hlo_module.pb").read_bytes()


def test_a_slice_bigger_than_its_allocation_is_refused() -> None:
    from fieldmem.xla._proto import BufferAssignmentProto

    data, module = _buffer_golden("straight")
    proto = BufferAssignmentProto()
    proto.ParseFromString(data)
    allocation = next(a for a in proto.buffer_allocations if len(a.assigned))
    allocation.assigned[0].size = allocation.size + 1
    with pytest.raises(buffers.BufferAssignmentError, match="a slice must lie inside its allocation"):
        buffers.decode_buffer_assignment(proto.SerializeToString(), module)


# ---- the mutants the fuzzer found, kept --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("self_dependency.hlo", "depends on itself"),
        ("call_cycle.hlo", "calls itself"),
        ("unknown_operand.hlo", "which no instruction of the computation defines"),
        ("defined_twice.hlo", "twice"),
    ],
)
def test_fuzzed_hlo_that_recursed_without_end(name: str, message: str) -> None:
    # each raised RecursionError in the queries (LoopInfo.depth, the output walk) on main
    with pytest.raises(hlo.HloStructureError, match=message):
        hlo.parse_hlo_module((FUZZ / name).read_text())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("slice_past_allocation.pb", "a slice must lie inside its allocation"),
        ("negative_offset.pb", "a slice must lie inside its allocation"),
        ("negative_allocation.pb", "has a negative size"),
    ],
)
def test_fuzzed_buffer_assignments_whose_live_peak_passed_all_allocations(name: str, message: str) -> None:
    with pytest.raises(buffers.BufferAssignmentError, match=message):
        buffers.decode_buffer_assignment((FUZZ / name).read_bytes())
