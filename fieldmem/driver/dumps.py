"""Compiles whose buffer assignment comes from XLA's dump: every accelerator compile, with or without the device.

``Compiled.memory_analysis()`` carries the serialized buffer assignment only
where jax holds XLA's executable itself (XLA:CPU). A TPU or GPU is reached
through the PJRT C API, which hands back sizes alone, on the chip as in a
deviceless compile (measured on a TPU v5e, jax 0.10.2, libtpu 0.0.42.1). The
compiler writes the assignment when asked to dump, and it can be asked per
compile (``compiler_options={"xla_dump_to": D, "xla_dump_hlo_as_proto": True}``;
``LIBTPU_INIT_ARGS=--xla_dump_to`` kills the process): the dumped
``*after_optimizations.hlo.pb`` (an ``HloProto``) holds the optimized module and
its buffer assignment, which ``fieldmem.xla.buffers.split_hlo_proto`` takes apart.
So every compile for a TPU or GPU goes through :func:`compile_dumped`, into a
scratch folder the parent process owns (removed whatever happens to the worker),
and the live peak, the buffers at the peak, peak by line and the flame graph
exist on the chip with the numbers of the deviceless report of the same program.

A program libtpu refuses for not fitting the chip's HBM (``RESOURCE_EXHAUSTED:
... exceeds available HBM``) is compiled again with
``xla_tpu_no_crash_on_oom`` (the same passes, that check off; fatal inside
``XLA_FLAGS``, accepted per compile), so that its figures can say by how much
it does not fit and the other variant is still analysed: the verdict says
"does not fit", and ``--run`` does not call it. One buffer larger than the chip
still fails, and is said in one line (:func:`does_not_fit`).

What a compile said beside its program (:class:`CompileNotes`) and what it
dumped are kept by the executable, weakly, for
:func:`fieldmem.driver.variant.read_variant`. jax is imported by the caller.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fieldmem.driver import quiet
from fieldmem.driver.dumped import has_assignment
from fieldmem.driver.jaxerrors import first_line
from fieldmem.model.errors import CompileError
from fieldmem.model.readings import DeviceMemory
from fieldmem.request.options import TPU_OOM_FIGURES_ENV

if TYPE_CHECKING:
    from fieldmem.driver.deviceless import Target

__all__ = [
    "DUMP_ROOT",
    "IN_PROCESS_ASSIGNMENT",
    "XLA_DOUBTS",
    "CacheKeyed",
    "CompileNotes",
    "compile_dumped",
    "compile_notes",
    "does_not_fit",
    "dump_options",
    "dump_under",
    "dumped",
    "is_dumped",
    "out_of_memory",
    "read_dump",
    "remember_dump",
    "remember_dumped",
    "remember_notes",
]

#: the platforms whose ``memory_analysis()`` carries the buffer assignment (jax holds XLA's executable); a
#: compile for any other platform dumps it (:func:`compile_dumped`). Tests empty it to compile XLA:CPU through
#: the dump too, which must give the same report.
IN_PROCESS_ASSIGNMENT: frozenset[str] = frozenset({"cpu"})

#: what XLA logs when it finds its own figures wrong while compiling. Seen from XLA:GPU's scheduler when the
#: arguments and outputs alone pass its memory limit (80% of the target config's device memory): "The byte
#: size of input/output arguments (2199023255552) exceeds the base limit (67954383257). This indicates an
#: error in the calculation!"
XLA_DOUBTS = re.compile(r"This indicates an error in the calculation")


def dump_options(folder: str) -> dict[str, Any]:
    """XLA options that dump the optimized module with its buffer assignment to ``folder`` (protos only)."""
    return {"xla_dump_to": folder, "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": False}


DUMP_ROOT: list[str | None] = [None]  # where dumped compiles dump: the parent's scratch folder


def dump_under(folder: str | None) -> None:
    """Dumped compiles dump under ``folder`` (created when first needed), a folder the parent removes whatever
    happens here (a worker killed in XLA); None: in the temporary directory, removed after each compile
    (in-process checks)."""
    DUMP_ROOT[0] = folder


def out_of_memory(exc: BaseException) -> str | None:
    """libtpu's words when ``exc`` says the program needs more HBM than the chip has (None: it does not)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not text.startswith("RESOURCE_EXHAUSTED") or not any(w in text.lower() for w in ("memory", "hbm")):
        return None
    return text.removeprefix("RESOURCE_EXHAUSTED:").strip()


def refusal(exc: BaseException, platform: str, memory: DeviceMemory | None, backend: str) -> str | None:
    """libtpu's words when ``exc`` is its refusal of a program that does not fit the chip's HBM, which is then
    compiled again without that check to tell its figures; None: the compile failed for another reason.

    Raises:
        CompileError: of kind ``out-of-memory``, where the environment asks not to compile a refused program
            again (``FIELDMEM_TPU_OOM_FIGURES=0``: ``fieldmem fit`` asks it of a point whose compile without
            the check crashed the process, as libtpu 0.0.42.1 does for some rematerialised programs).
    """
    said = out_of_memory(exc) if platform == "tpu" else None
    if said is not None and os.environ.get(TPU_OOM_FIGURES_ENV) == "0":
        raise refused(memory, backend, said)
    return said


def refused(memory: DeviceMemory | None, backend: str, said: str) -> CompileError:
    """The error of a program libtpu refused for not fitting (``said``), not compiled again to tell its figures:
    its kind is ``out-of-memory``."""
    holder = f" {memory.holder}" if memory is not None else ""
    error = CompileError(
        f"does not fit{holder}: libtpu refuses to compile it for {backend} ({said.rstrip('.')}); it was "
        "not compiled again without that check to tell its figures"
    )
    error.kind = "out-of-memory"
    return error


def does_not_fit(memory: DeviceMemory | None, backend: str, said: str, again: BaseException) -> CompileError:
    """The error of a program libtpu refused for not fitting (``said``) and cannot compile even with that check
    off (``again``: a single buffer larger than the chip's HBM): its kind is ``out-of-memory``, as a run's."""
    holder = f" {memory.holder}" if memory is not None else ""
    detail = (str(again).strip().splitlines() or [""])[0].removeprefix("RESOURCE_EXHAUSTED:").split(" :: ")[0]
    error = CompileError(
        f"does not fit{holder}: libtpu refuses to compile it for {backend} ({said.rstrip('.')}), and "
        f"cannot compile it at all to tell its figures ({detail.strip() or first_line(again)})"
    )
    error.kind = "out-of-memory"
    return error


class CacheKeyed(Protocol):
    """What :func:`compile_dumped` asks of jax's cache key of its compile (:class:`fieldmem.driver.early.CacheKey`:
    that module imports this one)."""

    loaded: bool

    def __enter__(self) -> CacheKeyed: ...

    def __exit__(self, *exc: object) -> None: ...

    def load(self) -> bytes | None: ...

    def save(self, hlo_proto: bytes) -> bool: ...


class _NoKey:
    """No key learnt, nothing kept: jax's cache off, or not asked."""

    loaded = False

    def __enter__(self) -> _NoKey:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def load(self) -> bytes | None:
        return None

    def save(self, hlo_proto: bytes) -> bool:
        return False


@dataclass(frozen=True)
class CompileNotes:
    """What a dumped compile said beside its program: ``target``, the deviceless backend it was compiled for
    (None: a device this machine has), libtpu's out-of-memory words when it was compiled again without that
    check, and the lines where XLA doubted its own figures."""

    target: Target | None
    platform: str
    out_of_memory: str | None = None
    doubts: tuple[str, ...] = ()
    loaded: bool = False  # jax's persistent cache held the executable: XLA compiled (and dumped) nothing


_notes: weakref.WeakKeyDictionary[Any, CompileNotes] = weakref.WeakKeyDictionary()
_dumps: weakref.WeakKeyDictionary[Any, bytes | None] = weakref.WeakKeyDictionary()


def remember_notes(compiled: Any, notes: CompileNotes) -> None:
    """Keep what ``compiled``'s compile said, for :func:`compile_notes` (read_variant asks)."""
    try:
        _notes[compiled] = notes
    except TypeError:  # pragma: no cover - jax's executables take weak references
        pass


def compile_notes(compiled: Any) -> CompileNotes | None:
    """What :func:`remember_notes` kept for ``compiled`` (None: not a dumped compile)."""
    try:
        return _notes.get(compiled)
    except TypeError:
        return None


def read_dump(folder: str) -> bytes | None:
    """The serialized ``HloProto`` (the optimized module and its buffer assignment) that a compile dumped
    to ``folder``; None when there is none. A module without an assignment is not a compile's: XLA dumps one
    under the same suffix when it loads an executable from jax's persistent cache."""
    for path in sorted(Path(folder).glob("*after_optimizations.hlo.pb")):
        data = path.read_bytes()
        if has_assignment(data):
            return data
    return None


def remember_dump(compiled: Any, folder: str) -> None:
    """Keep what ``compiled``'s compile dumped, for :func:`dumped` (read_memory asks)."""
    try:
        _dumps[compiled] = read_dump(folder)
    except OSError:
        _dumps[compiled] = None


def remember_dumped(compiled: Any, hlo_proto: bytes | None) -> None:
    """Keep ``hlo_proto``, already read, as what ``compiled``'s compile dumped (a compile stopped once it was
    dumped: :mod:`fieldmem.driver.early`; or the dump kept when jax's cache answered it: None where none was
    kept), for :func:`dumped`."""
    try:
        _dumps[compiled] = hlo_proto
    except TypeError:  # pragma: no cover - jax's executables take weak references
        pass


def is_dumped(compiled: Any) -> bool:
    """Whether ``compiled`` was compiled through :func:`compile_dumped`, whose dump :func:`dumped` gives."""
    try:
        return compiled in _dumps
    except TypeError:
        return False


def dumped(compiled: Any) -> bytes | None:
    """The ``HloProto`` dumped when ``compiled`` was compiled (None: none was, or not a dumped compile)."""
    try:
        return _dumps.get(compiled)
    except TypeError:
        return None


def compile_dumped(
    lowered: Any,
    platform: str,
    found: Target | None = None,
    options: dict[str, Any] | None = None,
    capacity: DeviceMemory | None = None,
    keyed: CacheKeyed | None = None,
) -> tuple[Any, float]:
    """Compile ``lowered`` for ``platform`` with XLA's dump on, keeping the buffer assignment it dumps and what
    the compile said beside it (:class:`CompileNotes`): a program libtpu refuses because it does not fit the
    chip's HBM is compiled again without that check, so that its figures can say by how much; a line where XLA
    doubts its own figures is kept (and not printed). ``found``: the deviceless backend compiled for (None: a
    device of this machine); ``options``: XLA options beside the dump's; ``capacity``: the device's memory, for
    the words of a program that cannot be compiled at all; ``keyed``: jax's cache key of the compile, learnt
    inside it (:class:`fieldmem.driver.early.CacheKey`): the dump is kept under it, and where jax's cache held
    the executable (XLA then dumps no assignment) the dump kept by the run that compiled it is read.

    Returns the executable and the seconds the compile (both, when it was compiled again) took.

    Raises:
        CompileError: XLA raised (kind ``out-of-memory`` when the program cannot be compiled even without the
            out-of-memory check).
    """

    name = found.backend.name if found is not None else platform
    root = DUMP_ROOT[0]
    if root is not None:
        os.makedirs(root, exist_ok=True)
    extra = dict(options or {})
    with tempfile.TemporaryDirectory(prefix="fieldmem-xla-", dir=root) as folder:
        start = time.perf_counter()
        said = None
        dumps = folder
        with quiet.quiet_stderr(take=XLA_DOUBTS) as log, keyed or _NoKey() as cached:
            try:
                compiled = lowered.compile(compiler_options={**dump_options(folder), **extra})
            except Exception as exc:
                said = refusal(exc, platform, capacity, name)
                if said is None:
                    where = f" for {found.backend.name}" if found is not None else ""
                    raise CompileError(f"XLA compilation{where} failed: {first_line(exc)}") from exc
                dumps = os.path.join(folder, "again")
                retry = {**dump_options(dumps), **extra, "xla_tpu_no_crash_on_oom": True}
                try:
                    compiled = lowered.compile(compiler_options=retry)
                except Exception as again:
                    raise does_not_fit(capacity, name, said, again) from exc
        seconds = time.perf_counter() - start
        if cached.loaded:  # XLA dumps no assignment of a program it loads: the one kept by the run that compiled it
            remember_dumped(compiled, cached.load())
        else:
            remember_dump(compiled, dumps)
            proto = dumped(compiled)
            if proto is not None and said is None:
                cached.save(proto)
        remember_notes(compiled, CompileNotes(found, platform, said, tuple(log.taken), cached.loaded))
    return compiled, seconds
