"""Every accelerator compile reads its buffer assignment from XLA's dump (``fieldmem.driver.dumps``).

On a TPU or GPU the buffer assignment is never in ``memory_analysis()`` (the PJRT C API carries sizes only),
so a compile for one of this machine's accelerators dumps it, as a deviceless compile does. CI has no
accelerator: these tests send XLA:CPU's compiles through the same path (the platforms whose
``memory_analysis()`` has the assignment emptied) and hold the report to the in-process one, figure for
figure, and drive the retry of a program libtpu refuses for not fitting with a stand-in of jax's ``Lowered``
that answers as libtpu does (its words recorded on the lent TPU v5e, jax 0.10.2, libtpu 0.0.42.1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.driver import dumps
from fieldmem.frontends.cli import app
from fieldmem.model.errors import CompileError
from fieldmem.model.readings import DeviceMemory

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

pytestmark = pytest.mark.compile

#: libtpu's words when a program does not fit the chip: recorded on the lent TPU v5e (jax 0.10.2, libtpu 0.0.42.1)
#: compiling u * 0.5 + f on two 5.5 GiB arrays without donation (hardware/results/tpu-check-raw.tgz)
LIBTPU_REFUSAL = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (16.50G) exceeds "
    "available HBM (15.75G)."
)
#: a stand-in for libtpu's words when one buffer alone is larger than the chip, even with that check off (the
#: form of its allocation errors; not recorded here)
LIBTPU_TOO_LARGE = "RESOURCE_EXHAUSTED: Attempting to reserve 20.00G at the bottom of memory. That was not possible."


def _report(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, ["check", *args, "--no-isolate", "--no-cache", "-f", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


_TIMES = ("seconds", "created")


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if not any(k.endswith(t) for t in _TIMES)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


@pytest.mark.parametrize(
    "example", ["examples/stencil_scan.py", "examples/sparse_row.py", "examples/train_step.py", "examples/field.py"]
)
def test_a_compile_through_the_dump_gives_the_in_process_report(example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    in_process = _report([example, "-v"])
    monkeypatch.setattr(dumps, "IN_PROCESS_ASSIGNMENT", frozenset())
    through_dump = _report([example, "-v"])
    assert _without_times(through_dump["results"]) == _without_times(in_process["results"])
    for result in through_dump["results"]:
        for variant in result["variants"].values():
            assert variant["memory"]["live_peak_bytes"] is not None, variant["memory"]["unavailable"]
            assert variant["peak"] is not None


class JaxRuntimeError(RuntimeError):
    """What jax raises for an XLA error (its name, as the error message shows it)."""


#: an ``HloProto`` as a compile dumps it: a module (field 1) and its buffer assignment (field 3), one allocation
DUMPED = b"\x0a\x02\x0a\x00" + b"\x1a\x04\x1a\x02\x10\x40"


class _Lowered:
    """A stand-in for jax's ``Lowered`` of a TPU program: ``compile`` answers as libtpu does."""

    def __init__(self, refusals: list[str]) -> None:
        self.refusals = list(refusals)
        self.options: list[dict[str, Any]] = []

    def compile(self, compiler_options: dict[str, Any]) -> object:
        self.options.append(dict(compiler_options))
        if self.refusals:
            raise JaxRuntimeError(self.refusals.pop(0))
        folder = Path(compiler_options["xla_dump_to"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "module_0001.jit_f.after_optimizations.hlo.pb").write_bytes(DUMPED)
        return _Executable()


class _Executable:
    """What a compile gives: anything that takes a weak reference."""


def test_a_program_libtpu_refuses_is_compiled_again_without_the_check(tmp_path: Path) -> None:
    dumps.dump_under(str(tmp_path))
    try:
        lowered = _Lowered([LIBTPU_REFUSAL])
        compiled, _ = dumps.compile_dumped(lowered, "tpu")
    finally:
        dumps.dump_under(None)
    first, again = lowered.options
    assert first["xla_dump_hlo_as_proto"] and "xla_tpu_no_crash_on_oom" not in first
    assert again["xla_tpu_no_crash_on_oom"] is True and again["xla_dump_to"] != first["xla_dump_to"]
    notes = dumps.compile_notes(compiled)
    assert notes is not None and notes.target is None and notes.platform == "tpu"
    assert notes.out_of_memory is not None and notes.out_of_memory.startswith("Ran out of memory on HBM")
    assert dumps.dumped(compiled) == DUMPED  # the second compile's dump
    assert list(tmp_path.iterdir()) == []  # the scratch folder is left empty


def test_a_buffer_larger_than_the_chip_is_one_line_out_of_memory() -> None:
    chip = DeviceMemory(16_909_336_576, "jax's allocator on device 0 (TPU v5 lite)", "memory_stats")
    with pytest.raises(CompileError) as caught:
        dumps.compile_dumped(_Lowered([LIBTPU_REFUSAL, LIBTPU_TOO_LARGE]), "tpu", capacity=chip)
    assert caught.value.kind == "out-of-memory"
    message = str(caught.value)
    assert "\n" not in message and "does not fit jax's allocator on device 0" in message
    assert "Attempting to reserve 20.00G" in message and "HLO temporaries (16.50G)" in message


def test_a_refusal_that_is_not_memory_is_the_compile_error(tmp_path: Path) -> None:
    lowered = _Lowered(["INVALID_ARGUMENT: something else"])
    with pytest.raises(CompileError, match="XLA compilation failed: JaxRuntimeError: INVALID_ARGUMENT: something else"):
        dumps.compile_dumped(lowered, "tpu")
    assert len(lowered.options) == 1
    # on a GPU, RESOURCE_EXHAUSTED is not retried: the out-of-memory check off is libtpu's option alone
    lowered = _Lowered([LIBTPU_REFUSAL])
    with pytest.raises(CompileError, match="RESOURCE_EXHAUSTED"):
        dumps.compile_dumped(lowered, "gpu")
    assert len(lowered.options) == 1
