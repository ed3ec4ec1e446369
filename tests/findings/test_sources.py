"""Where a finding points, and what is compiled into the program: call sites and constants (issue 14, items 8 and 9).

- A copy XLA keeps at a line of flax or optax is reported at that line *and* at
  the user's line that led there (``call_site``), and ``--format github``
  annotates the user's line. The stack comes from the ``StackFrames`` table of
  the optimized HLO; its parent ids are checked against the module proto of the
  same compile.
- An array the function closes over is compiled in as a constant: its bytes are
  the variant's ``constant_bytes`` (checked against the buffer assignment and
  against XLA's own peak), and one of at least ``min_bytes`` is a finding.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
import warnings
from pathlib import Path
from typing import Any

import pytest

from fieldmem.model.libraries import is_library_file
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.request.definitions import display_path
from fieldmem.xla import buffers, hlo

HERE = Path(__file__).resolve()

# ----------------------------------------------------------------------------
# Pure: the stack tables, what is library code

# As jax 0.10.2's XLA prints it: a parent id is one more than the frame it names
# (frame 1, a root, prints 1). model.py:20 step -> model.py:9 M.__call__ -> flax.
SHIFTED = """HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

FileNames
1 "/home/u/proj/model.py"
2 "/opt/venv/lib/python3.11/site-packages/flax/linen/linear.py"
3 "<frozen runpy>"

FunctionNames
1 "<module>"
2 "step"
3 "M.__call__"
4 "Dense.__call__"
5 "_run_code"

FileLocations
1 {file_name_id=3 function_name_id=5 line=88 end_line=88 column=4 end_column=27}
2 {file_name_id=1 function_name_id=2 line=20 end_line=20 column=8 end_column=25}
3 {file_name_id=1 function_name_id=3 line=9 end_line=9 column=15 end_column=29}
4 {file_name_id=2 function_name_id=4 line=287 end_line=292 column=8 end_column=5}
5 {file_name_id=1 function_name_id=2 line=21 end_line=21 column=11 end_column=16}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}
4 {file_location_id=4 parent_frame_id=4}
5 {file_location_id=5 parent_frame_id=2}


ENTRY %main.1 (x.1: f32[8]) -> f32[8] {
  %x.1 = f32[8]{0} parameter(0), metadata={op_name="x"}
  %dense = f32[8]{0} negate(%x.1), metadata={op_name="jit(step)/M/Dense_0/neg" stack_frame_id=4}
  ROOT %mine = f32[8]{0} abs(%dense), metadata={op_name="jit(step)/abs" stack_frame_id=5}
}
"""


def _instruction(text: str, name: str) -> hlo.HloInstruction:
    return hlo.parse_hlo_module(text).entry.by_name()[name]


def test_a_stack_frame_knows_the_frames_that_called_it() -> None:
    dense = _instruction(SHIFTED, "dense")
    assert dense.source is not None
    assert [(f.file, f.line, f.function) for f in dense.source.stack] == [
        ("/opt/venv/lib/python3.11/site-packages/flax/linen/linear.py", 287, "Dense.__call__"),
        ("/home/u/proj/model.py", 9, "M.__call__"),
        ("/home/u/proj/model.py", 20, "step"),
        ("<frozen runpy>", 88, "_run_code"),
    ]
    # the innermost frame of the user's own code: M.__call__, not step, not the interpreter
    assert hlo.call_site(dense.source, is_library_file) == hlo.SourceLocation("/home/u/proj/model.py", 9, "M.__call__")
    mine = _instruction(SHIFTED, "mine")
    assert mine.source is not None and [f.line for f in mine.source.stack] == [21, 88]
    assert hlo.call_site(mine.source, is_library_file) is None  # the user's own line is its own call site


def test_parent_ids_printed_as_in_the_proto_are_read_too() -> None:
    # the same stacks with parent ids as the proto holds them (0 for a root)
    direct = SHIFTED
    for frame, printed, true in ((1, 1, 0), (2, 2, 1), (3, 3, 2), (4, 4, 3), (5, 2, 1)):
        direct = direct.replace(
            f"{frame} {{file_location_id={frame} parent_frame_id={printed}}}",
            f"{frame} {{file_location_id={frame} parent_frame_id={true}}}",
        )
    assert direct != SHIFTED
    dense = _instruction(direct, "dense")
    assert dense.source is not None and [f.line for f in dense.source.stack] == [287, 9, 20, 88]
    assert hlo.call_site(dense.source, is_library_file) == hlo.SourceLocation("/home/u/proj/model.py", 9, "M.__call__")


def test_a_table_that_does_not_say_how_it_counts_gives_no_callers() -> None:
    # frame 1 (a root either way) printing parent 7: neither convention, so no stack is guessed
    odd = SHIFTED.replace("1 {file_location_id=1 parent_frame_id=1}", "1 {file_location_id=1 parent_frame_id=7}")
    dense = _instruction(odd, "dense")
    assert dense.source is not None and dense.source.line == 287
    assert dense.source.callers == ()
    assert hlo.call_site(dense.source, is_library_file) is None


def test_a_parent_chain_that_loops_ends() -> None:
    # frame 4 names itself as parent (printed 5 = 4 + 1): not a parent, the stack ends there
    looped = SHIFTED.replace("4 {file_location_id=4 parent_frame_id=4}", "4 {file_location_id=4 parent_frame_id=5}")
    dense = _instruction(looped, "dense")
    assert dense.source is not None and dense.source.callers == ()


def test_another_interpreters_folders_are_library_code_once_its_worker_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker under another Python (--python, --jax) names its installation folders; its standard library,
    which lies in no site-packages, is then library code here too, and the user's files stay theirs."""
    from fieldmem.model import libraries

    monkeypatch.setattr(libraries, "_OTHER_INTERPRETERS", [])
    other = "/opt/python3.12/lib/python3.12"
    try:
        libraries.library_folders.cache_clear()
        libraries.is_library_file.cache_clear()
        assert not is_library_file(f"{other}/functools.py")  # read before the worker said it
        libraries.add_library_folders([other, other])
        assert is_library_file(f"{other}/functools.py")
        assert libraries.library_folders().count(other) == 1
        assert not is_library_file("/home/u/proj/model.py")
    finally:
        monkeypatch.undo()
        libraries.library_folders.cache_clear()
        libraries.is_library_file.cache_clear()
    assert not is_library_file(f"{other}/functools.py")


def test_a_folder_pip_installed_into_on_the_path_is_library_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip install --target DIR`` with DIR on ``PYTHONPATH`` (a TPU machine's image keeps jax in such a folder,
    and a user's extra packages go in another): its files are library code, as site-packages' are; a checkout
    on the path, with an ``*.egg-info`` of its editable install, stays the user's."""
    from fieldmem.model import libraries

    target = tmp_path / "site"
    (target / "equinox").mkdir(parents=True)
    (target / "equinox-0.13.8.dist-info").mkdir()
    checkout = tmp_path / "proj"
    (checkout / "proj.egg-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(checkout))
    monkeypatch.syspath_prepend(str(target))
    try:
        libraries.library_folders.cache_clear()
        libraries.is_library_file.cache_clear()
        libraries.install_targets.cache_clear()
        assert is_library_file(str(target / "equinox" / "_update.py"))
        assert not is_library_file(str(checkout / "model.py"))
        # shown from the package on, as a file in site-packages is: the same on every machine
        assert display_path(str(target / "equinox" / "_update.py"), cwd=str(checkout)) == "equinox/_update.py"
    finally:
        monkeypatch.undo()
        libraries.library_folders.cache_clear()
        libraries.is_library_file.cache_clear()
        libraries.install_targets.cache_clear()
    assert not is_library_file(str(target / "equinox" / "_update.py"))


def test_what_is_library_code() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    purelib = sysconfig.get_paths()["purelib"]
    assert is_library_file(os.path.join(stdlib, "runpy.py"))
    assert is_library_file(os.path.join(purelib, "flax", "linen", "linear.py"))
    assert is_library_file("/somewhere/else/lib/python3.12/site-packages/optax/_src/transform.py")
    assert is_library_file("/usr/lib/python3/dist-packages/numpy/core.py")
    assert is_library_file(hlo.__file__)  # fieldmem itself
    assert is_library_file("<frozen runpy>") and is_library_file("<string>")
    assert not is_library_file(str(HERE))  # the user's tests
    assert not is_library_file("/home/u/proj/model.py")
    assert not is_library_file("model.py")  # relative to where jax ran: the user's


# ----------------------------------------------------------------------------
# Real compiles


def _line_of(function: Any, marker: str) -> int:
    """The line of ``function`` holding ``marker``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(n for n, line in enumerate(lines) if marker in line)


def _stack_frames_from_proto(module_proto: bytes) -> dict[int, tuple[int, int]]:
    """``stack_frame_index.stack_frames`` (HloModuleProto field 17, its field 4) of a serialized module:
    frame id (1-based) -> (file_location_id, parent_frame_id), read with a minimal wire-format reader."""

    def varint(data: bytes, i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, i

    def fields(data: bytes) -> list[tuple[int, Any]]:
        out, i = [], 0
        while i < len(data):
            key, i = varint(data, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = varint(data, i)
            elif wire == 2:
                size, i = varint(data, i)
                value, i = data[i : i + size], i + size
            elif wire == 1:
                value, i = data[i : i + 8], i + 8
            elif wire == 5:
                value, i = data[i : i + 4], i + 4
            else:
                raise ValueError(f"wire type {wire}")
            out.append((number, value))
        return out

    frames: dict[int, tuple[int, int]] = {}
    for number, index in fields(module_proto):
        if number != 17:
            continue
        for inner, frame in fields(index):
            if inner == 4:
                values = dict(fields(frame))
                frames[len(frames) + 1] = (values.get(1, 0), values.get(2, 0))
    return frames


@pytest.mark.compile
def test_the_text_stacks_are_the_proto_stacks() -> None:
    """Every instruction's stack read from the text follows the parent ids of the module proto."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class M(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(8)(x)

    def helper(params: Any, x: Any) -> Any:
        return M().apply(params, x)

    def step(params: Any, x: Any) -> Any:
        return helper(params, x) * 2

    x = jnp.ones((4, 16))
    params = M().init(jax.random.PRNGKey(0), x)
    compiled = jax.jit(step).lower(params, x).compile()
    text = compiled.as_text()
    proto = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    frames = _stack_frames_from_proto(proto)
    assert frames and frames[1][1] == 0  # the proto's first frame is a root

    def proto_stack(frame: int) -> list[int]:
        chain = []
        while frame:
            chain.append(frames[frame][0])  # its file location
            frame = frames[frame][1]
        return chain

    module = hlo.parse_hlo_module(text)
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    # each instruction with a stack_frame_id: its stack of (file, line) equals the proto's chain
    locations = _file_locations(text)
    checked = 0
    for line in text.splitlines():
        if "stack_frame_id=" not in line or " = " not in line:
            continue
        frame = int(line.split("stack_frame_id=")[1].split("}")[0].split()[0])
        name = line.split(" = ")[0].replace("ROOT", "").strip().lstrip("%")
        source = by_name[name].source
        assert source is not None
        assert [(f.file, f.line) for f in source.stack] == [locations[n] for n in proto_stack(frame)]
        checked += 1
    assert checked
    dense = [i for c in module.computations for i in c.instructions if i.source and "flax" in i.source.file]
    assert dense, "no instruction from flax"
    site = hlo.call_site(dense[0].source, is_library_file)
    assert site is not None and site.file == str(HERE) and site.line == _line_of(M.__call__, "nn.Dense(8)(x)")


def _file_locations(text: str) -> dict[int, tuple[str, int]]:
    """FileLocations id -> (file, line), read from the text's own tables."""
    names: dict[int, str] = {}
    locations: dict[int, tuple[str, int]] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = stripped
            continue
        if not stripped:
            section = None
            continue
        if section == "FileNames":
            number, _, name = stripped.partition(" ")
            names[int(number)] = name.strip('"')
        elif section == "FileLocations":
            number, _, rest = stripped.partition(" ")
            fields = dict(part.split("=") for part in rest.strip("{}").split())
            locations[int(number)] = (names[int(fields["file_name_id"])], int(fields["line"]))
    return locations


# --- a copy made inside flax and optax


def _check(fn: Any, *args: Any, min_bytes: int = 0, **options: Any) -> Report:
    import fieldmem

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fieldmem.check_function(fn, *args, min_bytes=min_bytes, **options)


class _Flax:
    """A flax linen step that returns its old params too: with donation, XLA copies the kernel,
    and the copy's source (its first reader) is flax's Dense."""

    @staticmethod
    def build() -> tuple[Any, tuple[Any, ...]]:
        import flax.linen as nn
        import jax
        import jax.numpy as jnp
        import optax

        class M(nn.Module):
            @nn.compact
            def __call__(self, x: Any) -> Any:
                return nn.Dense(64)(x)  # the call site

        model = M()
        tx = optax.sgd(1e-2)

        def loss_fn(params: Any, x: Any) -> Any:
            return jnp.sum(model.apply(params, x) ** 2)

        def step(params: Any, opt_state: Any, x: Any) -> Any:
            grads = jax.grad(loss_fn)(params, x)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, params

        x = jnp.ones((8, 64))
        params = model.init(jax.random.PRNGKey(0), x)
        _Flax.call_site_line = _line_of(M.__call__, "the call site")
        return step, (params, tx.init(params), x)

    call_site_line = 0


@pytest.fixture(scope="module")
def flax_report() -> Report:
    step, args = _Flax.build()
    return _check(step, *args)


LIBRARIES = ("flax/", "optax/", "jax/", "site-packages/")


def _in_library(source: str | None) -> bool:
    """A source in an installed package: shown from the package on (``flax/linen/linear.py:287``)."""
    return source is not None and source.startswith(LIBRARIES)


def _library_copy(result: TargetResult) -> Any:
    copies = [c for c in result.variants["donated"].copies if _in_library(c.source)]
    assert copies, [c.source for c in result.variants["donated"].copies]
    return copies[0]


@pytest.mark.compile
def test_a_copy_made_in_flax_names_the_users_call_site(flax_report: Report) -> None:
    result = flax_report.results[0]
    copy = _library_copy(result)
    assert copy.of_parameter == "params['params']['Dense_0']['kernel']"
    assert "flax/linen/linear.py:" in copy.source
    expected = f"{os.path.relpath(HERE)}:{_Flax.call_site_line}"
    assert copy.call_site == expected
    # the finding says both lines, and carries the call site
    assert result.verdict is not None
    finding = next(f for f in result.verdict.findings if f.code == "parameter-copy" and f.source == copy.source)
    assert finding.call_site == expected
    assert f"at {copy.source} (called from {expected})" in finding.message
    # a copy at the user's own line has no call site
    assert all(c.call_site is None for c in result.variants["donated"].copies if c.source and not _in_library(c.source))


@pytest.mark.compile
def test_a_copy_made_in_optax_names_the_users_call_site() -> None:
    import jax.numpy as jnp
    import optax

    tx = optax.adam(1e-3)

    def step(params: Any, opt_state: Any, grads: Any) -> Any:
        updates, new_state = tx.update(grads, opt_state, params)  # the optax call
        return optax.apply_updates(params, updates), new_state, opt_state

    params = {"w": jnp.ones((64, 64))}
    result = _check(step, params, tx.init(params), {"w": jnp.ones((64, 64))}).results[0]
    in_optax = [c for c in result.variants["donated"].copies if c.source and c.source.startswith("optax/")]
    assert in_optax, [c.source for c in result.variants["donated"].copies]
    line = _line_of(step, "the optax call")
    assert {c.call_site for c in in_optax} == {f"{os.path.relpath(HERE)}:{line}"}


@pytest.mark.compile
def test_the_aliases_of_the_flax_step_hold_at_run_time(flax_report: Report) -> None:
    """The report the call sites are read from is the program that runs: its aliases are real."""
    import jax

    from helpers_compile import compile_quietly, run_and_check_aliases

    step, args = _Flax.build()
    result = flax_report.results[0]
    compiled = compile_quietly(jax.jit(step, donate_argnums=(0, 1, 2)), *args)
    run_and_check_aliases(compiled, result, args, {}, ["params", "opt_state", "x"])


@pytest.mark.compile
def test_the_renderers_show_the_call_site(flax_report: Report) -> None:
    from fieldmem.render import RenderOptions, get_renderer

    result = flax_report.results[0]
    copy = _library_copy(result)
    call_site = copy.call_site
    assert call_site is not None
    # github: the annotation lands on the user's file, not in site-packages
    github = get_renderer("github").render(flax_report, RenderOptions(min_bytes=0))
    annotations = [line for line in github.splitlines() if "parameter-copy" in line and "called from" in line]
    assert annotations
    file, _, line = call_site.rpartition(":")
    for annotation in annotations:
        assert f"file={Path(file).as_posix()},line={line}," in annotation
    assert not any("file=" in a and _in_library(a.split("::")[1].split("file=")[1]) for a in github.splitlines())
    # the verbose table names it by the copy; markdown and html by the finding and the copy
    table = get_renderer("table").render(flax_report, RenderOptions(min_bytes=0, verbose=True, width=400))
    assert f"(called from {call_site})" in table
    markdown = get_renderer("markdown").render(flax_report, RenderOptions(min_bytes=0, verbose=True))
    assert "called from" in markdown
    assert call_site in markdown or call_site.replace("_", "\\_") in markdown
    html = get_renderer("html").render(flax_report, RenderOptions(min_bytes=0))
    assert "called from</span>" in html


@pytest.mark.compile
def test_call_sites_and_constants_survive_the_json_round_trip(flax_report: Report) -> None:
    again = Report.from_dict(flax_report.to_dict())
    assert again == flax_report
    copy = _library_copy(again.results[0])
    assert copy.call_site is not None
    # an older report, without the new keys, still reads (None)
    document = flax_report.to_dict()
    for result in document["results"]:
        for variant in result["variants"].values():
            variant["memory"].pop("constant_bytes")
            for c in variant["copies"]:
                c.pop("call_site")
            for b in variant["live_at_peak"]:
                b.pop("call_site")
        for f in result["verdict"]["findings"]:
            f.pop("call_site")
    older = Report.from_dict(document)
    variant = older.results[0].variants["donated"]
    assert variant.memory.constant_bytes is None and all(c.call_site is None for c in variant.copies)


# --- constants


def _constant_allocations(fn: Any, *args: Any) -> tuple[int, Any]:
    """Bytes of the constant allocations of XLA's buffer assignment for ``jax.jit(fn)``, and its memory_analysis()."""
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    analysis = compiled.memory_analysis()
    assignment = buffers.decode_buffer_assignment(
        analysis.serialized_buffer_assignment_proto,
        compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto(),
    )
    text_bytes = sum(site.bytes for site in hlo.find_constants(hlo.parse_hlo_module(compiled.as_text())))
    allocated = sum(a.size for a in assignment.allocations if a.is_constant)
    assert text_bytes == allocated  # the HLO text's constants are what XLA allocates
    return allocated, analysis


@pytest.mark.compile
def test_a_closed_over_array_is_reported_as_constant_bytes() -> None:
    import jax
    import jax.numpy as jnp

    weights = jax.random.normal(jax.random.PRNGKey(0), (128, 96))  # 48 KiB, random: XLA cannot fold it

    def forward(x: Any) -> Any:
        return x @ weights  # reads the constant

    x = jnp.ones((4, 128))
    report = _check(forward, x, min_bytes=1024)
    result = report.results[0]
    allocated, analysis = _constant_allocations(forward, x)
    for name in ("plain", "donated"):
        memory = result.variants[name].memory
        assert memory.constant_bytes == allocated == weights.nbytes
        # XLA's peak counts the constants, and so does fieldmem's footprint (issue 19, item 11)
        assert memory.peak_bytes == analysis.peak_memory_in_bytes
        assert memory.footprint_bytes is not None
        assert memory.peak_bytes <= memory.footprint_bytes
        parts = (memory.argument_bytes, memory.output_bytes, memory.temp_bytes, memory.alias_bytes)
        argument, output, temp, alias = (int(p or 0) for p in parts)
        assert memory.footprint_bytes == argument + output + temp - alias + weights.nbytes
    assert result.verdict is not None
    (finding,) = [f for f in result.verdict.findings if f.code == "constant"]
    assert finding.severity == "warning"
    assert "f32[128,96]" in finding.message and "48.0 KiB" in finding.message
    assert "pass it as an argument" in finding.message
    assert finding.source == f"{os.path.relpath(HERE)}:{_line_of(forward, 'reads the constant')}"
    assert finding.call_site is None
    # below the threshold: the figure stays, the finding goes
    quiet = _check(forward, x, min_bytes=weights.nbytes + 1).results[0]
    assert quiet.variants["donated"].memory.constant_bytes == weights.nbytes
    assert quiet.verdict is not None and not [f for f in quiet.verdict.findings if f.code == "constant"]


@pytest.mark.compile
def test_a_large_constant_counts_in_footprint_and_live_peak_as_in_xla_peak() -> None:
    """Issue 19, item 11: ``u + BIG`` with a non-uniform numpy constant (4 MiB here, 1 GiB in
    the issue). XLA's peak_bytes is arguments + output + the constant; the footprint and the
    live peak left the constant out, so ``--max-peak`` passed what does not fit."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    big = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MiB, non-uniform

    def add_big(u: Any) -> Any:
        return u + big

    u = jnp.zeros((1 << 20,), jnp.float32)
    compiled = jax.jit(add_big).lower(u).compile()
    xla_peak = compiled.memory_analysis().peak_memory_in_bytes
    assert xla_peak >= 3 * big.nbytes  # the argument, the output and the constant
    result = _check(add_big, u).results[0]
    plain = result.variants["plain"].memory
    assert plain.constant_bytes == big.nbytes and plain.peak_bytes == xla_peak
    # what the executable holds at once includes the constant, as XLA's peak does
    assert plain.footprint_bytes == plain.live_peak_bytes == xla_peak == 3 * big.nbytes
    donated = result.variants["donated"].memory
    assert donated.constant_bytes == big.nbytes
    assert donated.footprint_bytes == donated.live_peak_bytes == 2 * big.nbytes  # u's buffer holds the sum
    # a budget between the old plain figure (2 x 4 MiB) and the true one no longer passes
    report = _check(add_big, u, donate="none", max_peak=(5 * big.nbytes) // 2)
    (check,) = [c for c in report.results[0].checks if c.name == "max-footprint"]
    assert not check.passed and check.value == 3 * big.nbytes


@pytest.mark.compile
def test_passing_the_array_instead_leaves_no_constant() -> None:
    import jax
    import jax.numpy as jnp

    weights = jax.random.normal(jax.random.PRNGKey(0), (128, 96))

    def forward(x: Any, w: Any) -> Any:
        return x @ w

    result = _check(forward, jnp.ones((4, 128)), weights, donate="none").results[0]
    memory = result.variants["donated"].memory
    assert memory.constant_bytes == 0
    assert memory.argument_bytes == 4 * 128 * 4 + weights.nbytes
    assert result.verdict is not None and not [f for f in result.verdict.findings if f.code == "constant"]


@pytest.mark.compile
def test_a_method_reading_self_weights_bakes_them_in() -> None:
    """The nnx-style shape: a bound method reading an array attribute (a plain class, then a flax nnx module)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class Model:
        def __init__(self) -> None:
            self.weights = jax.random.normal(jax.random.PRNGKey(1), (256, 64))  # 64 KiB

        def apply(self, x: Any) -> Any:
            return jnp.tanh(x @ self.weights)

    model = Model()
    x = jnp.ones((2, 256))
    result = _check(model.apply, x).results[0]
    allocated, _ = _constant_allocations(model.apply, x)
    assert result.variants["donated"].memory.constant_bytes == allocated == model.weights.nbytes
    assert result.verdict is not None
    assert [f for f in result.verdict.findings if f.code == "constant"]

    linear = nnx.Linear(256, 64, rngs=nnx.Rngs(0))

    def nnx_forward(x: Any) -> Any:
        return linear(x)  # closes over the module's kernel and bias

    result = _check(nnx_forward, x).results[0]
    kernel, bias = linear.kernel[...].nbytes, linear.bias[...].nbytes
    memory = result.variants["donated"].memory
    assert memory.constant_bytes is not None and memory.constant_bytes >= kernel
    assert memory.constant_bytes == _constant_allocations(nnx_forward, x)[0]
    assert result.verdict is not None
    sizes = [f.message for f in result.verdict.findings if f.code == "constant"]
    assert any("64.0 KiB" in m for m in sizes), sizes
    assert bias < 1024 or any(f"{bias} B" in m for m in sizes)


@pytest.mark.compile
def test_scalar_constants_count_as_bytes_but_are_no_finding() -> None:
    """A loop's bounds and Python numbers are scalar constants: in the figure, never a warning."""
    import jax
    import jax.numpy as jnp

    def loop(x: Any) -> Any:
        return jax.lax.fori_loop(0, 10, lambda i, c: c * 1.5 + i, x)

    x = jnp.ones((8,))
    result = _check(loop, x, min_bytes=0).results[0]
    allocated, _ = _constant_allocations(loop, x)
    assert allocated > 0
    assert result.variants["donated"].memory.constant_bytes == allocated
    assert result.verdict is not None and not [f for f in result.verdict.findings if f.code == "constant"]
