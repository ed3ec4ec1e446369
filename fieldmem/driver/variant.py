"""Reading one lowered and compiled program into a :class:`~fieldmem.model.readings.CompiledVariant` (plain data).

What XLA planned (``Compiled.memory_analysis()``, documented as unstable,
read in :func:`read_memory` only), the optimized HLO, the argument and output
leaves numbered as the report numbers them with their shardings and layouts
(read in :mod:`fieldmem.driver.leaves`), which arguments jit kept (``Lowered._lowering.compile_args["kept_var_idx"]``,
tolerated when missing), what jax donated, and the devices the program runs
on. Nothing is lowered, compiled or run here; jax is imported on first use.
"""

from __future__ import annotations

import threading
from typing import Any

from fieldmem.driver import dumps
from fieldmem.driver.early import stood_in
from fieldmem.driver.leaves import (
    compiled_formats,
    compiled_outputs,
    input_leaves,
    input_placements,
    memory_kinds,
    with_device_shapes,
)
from fieldmem.driver.prepare import PreparedCall
from fieldmem.model.collector import collector_paused
from fieldmem.model.readings import (
    CACHE_LOADED,
    NOTHING_DUMPED,
    CompiledVariant,
    DeviceMemory,
    InputLeaf,
    MemoryReading,
    OutputLeaf,
)
from fieldmem.request import backends

__all__ = [
    "DEVICELESS_GPU_UNAVAILABLE",
    "FAST_COMPILE_UNAVAILABLE",
    "MEMORY_FIELDS",
    "allocator_memory",
    "executable_devices",
    "read_memory",
    "read_variant",
]

# The memory_analysis() attributes fieldmem reports, under their report names.
MEMORY_FIELDS: dict[str, str] = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
    "peak_bytes": "peak_memory_in_bytes",
    "host_argument_bytes": "host_argument_size_in_bytes",
    "host_output_bytes": "host_output_size_in_bytes",
    "host_alias_bytes": "host_alias_size_in_bytes",
    "host_temp_bytes": "host_temp_size_in_bytes",
}

# the figures a fast compile (fieldmem.driver.lowering.FAST_COMPILE_OPTIONS) leaves unreliable:
# reported as unavailable, with the reason
FAST_COMPILE_UNAVAILABLE: dict[str, str] = {
    "generated_code_bytes": "--fast-compile generates the code without LLVM optimisation, "
    "so its size is not that of a default compile",
}


# the figures XLA does not give for a GPU compiled without the device: reported as unavailable, with the reason
DEVICELESS_GPU_UNAVAILABLE: dict[str, str] = {
    "generated_code_bytes": "XLA gives no size of the code it generates for a GPU compiled without the device "
    "(its memory_analysis() reads 0)",
}


@collector_paused()  # builds only fieldmem's records: see fieldmem.model.collector
def read_variant(
    name: str,
    call: PreparedCall,
    lowered: Any,
    compiled: Any,
    lowering_warnings: tuple[str, ...],
    lower_seconds: float,
    compile_seconds: float,
    donated: bool = False,
    fast: bool = False,
    like: tuple[tuple[OutputLeaf, ...], Any] | None = None,
) -> tuple[CompiledVariant, Any]:
    """What ``compiled`` (lowered as ``lowered`` from ``call``) is, as plain data, and for the ``donated``
    variant its outputs as a pytree of ``ShapeDtypeStruct`` with the compiled shardings (a chain's next
    arguments; None for the plain variant, whose outputs nothing hands on).

    ``donated``: the variant asked for a donation (then a donation jax dropped
    is said, with why); ``fast``: compiled with the fast options (the figures
    they change are unavailable); ``like``: the output leaves of the other
    variant of the same trace and its ``out_tree`` (taken as they are where
    this program's output tree and formats are the same).
    """
    kept, tuple_args = _kept_var_idx(lowered)
    # XLA's memory analysis (C++ whose time grows with the program) lets go of the GIL: it runs
    # in a thread while this one reads the outputs, the leaves and the text
    analysis = _MemoryAnalysis(compiled)
    outputs, output_structs = compiled_outputs(
        lowered, compiled, call, structs=donated, like=like
    )  # structs: when asked for
    inputs = input_leaves(
        call,
        lowered.args_info,
        kept,
        compiled_formats(compiled, "input"),
        input_placements(compiled),
        memory_kinds(compiled, "input"),
    )
    inputs, outputs = with_device_shapes(call, compiled, inputs, outputs)
    hlo_text = compiled.as_text()
    memory = read_memory(compiled, fast, analysis)
    devices = executable_devices(compiled)  # once: it walks the sharding of every leaf
    variant = CompiledVariant(
        name=name,
        donated_arguments=_donated_argument_names(call, lowered, inputs),
        inputs=inputs,
        outputs=outputs,
        hlo_text=hlo_text,
        memory=memory.figures,
        memory_unavailable=memory.unavailable,
        lowering_warnings=lowering_warnings,
        tuple_args=tuple_args,
        lower_seconds=lower_seconds,
        compile_seconds=compile_seconds,
        buffer_assignment=memory.buffer_assignment,
        hlo_module_proto=memory.hlo_module_proto,
        hlo_proto=memory.hlo_proto,
        buffers_unavailable=memory.buffers_unavailable,
        donation_dropped=_donation_dropped(call, inputs) if donated else None,
        devices=tuple(d.id for d in devices),
        made_static=call.made_static,
        fast_compile=fast,
        device_memory=_device_memory(compiled, devices),
        out_of_memory=_out_of_memory(compiled),
        platform=_platform(compiled, devices),
        backend=_backend_of(compiled, devices),
    )
    return variant, output_structs


def _backend_of(compiled: Any, devices: list[Any]) -> str | None:
    """The backend ``compiled`` is for, as ``--backend`` names it: a deviceless kind's name (``tpu:v5e``), else
    the platform of the devices it runs on (``devices``, :func:`executable_devices`: ``cpu``); None where jax does
    not say."""

    notes = dumps.compile_notes(compiled)
    if notes is not None and notes.target is not None:
        return str(notes.target.backend.name)
    return _platform(compiled, devices)


def _platform(compiled: Any, devices: list[Any]) -> str | None:
    """The platform ``compiled`` runs on: a dumped compile's (a deviceless one's is its target's), else that of
    its devices (``devices``; None where jax does not say)."""

    notes = dumps.compile_notes(compiled)
    if notes is not None:
        return notes.platform
    return str(devices[0].platform) if devices else None


def _device_memory(compiled: Any, devices: list[Any]) -> DeviceMemory | None:
    """The memory the program has on each device it runs on (``devices``): a deviceless kind's
    (:func:`fieldmem.request.backends.device_memory`), else that of jax's allocator (:func:`allocator_memory`)."""

    notes = dumps.compile_notes(compiled)
    if notes is not None and notes.target is not None:
        return backends.device_memory(notes.target.backend)
    return allocator_memory(devices)


def allocator_memory(devices: list[Any]) -> DeviceMemory | None:
    """The least ``bytes_limit`` that jax's allocator gives of ``devices`` (``Device.memory_stats()``; None
    where it gives none, as on XLA:CPU)."""
    limits = []
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:
            return None
        limit = stats.get("bytes_limit") if isinstance(stats, dict) else None
        if not isinstance(limit, int) or limit <= 0:
            return None
        limits.append((limit, device.id, getattr(device, "device_kind", device.platform)))
    if not limits:
        return None
    limit, number, kind = min(limits)
    return DeviceMemory(
        limit, f"jax's allocator on device {number} ({kind})", "Device.memory_stats()['bytes_limit'] of the device"
    )


def _out_of_memory(compiled: Any) -> str | None:
    """The compiler's words when it refused ``compiled`` for not fitting the device, before it was compiled
    again without that check (:func:`fieldmem.driver.lowering.compile_lowered`)."""

    notes = dumps.compile_notes(compiled)
    return notes.out_of_memory if notes is not None else None


def _donation_dropped(call: PreparedCall, inputs: tuple[InputLeaf, ...]) -> str | None:
    """Why the donated variant of ``call`` donates none of ``inputs`` although it asked to (None: it donates,
    or it asked for nothing)."""
    if not (call.donated_positions or call.donated_names) or any(leaf.donated for leaf in inputs):
        return None
    asked = [call.positional_names[i] for i in sorted(call.donated_positions)] + sorted(call.donated_names)
    return f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} to be donated, but " + _donation_dropped_reason()


def _donation_dropped_reason() -> str:
    """Why jax lowered a program without the donation it was asked for (read from jax's config)."""
    import jax

    if getattr(jax.config, "jax_debug_nans", False):
        return (
            "jax_debug_nans is on, and under it jax drops every donate_argnums/donate_argnames "
            "(the program is compiled without donation); turn it off to check or run in place"
        )
    return "jax lowered the program without donating any of them"


def executable_devices(compiled: Any) -> list[Any]:
    """The devices a compiled program runs on, by id (empty when jax does not say)."""
    import jax

    found: dict[int, Any] = {}
    try:
        for sharding in jax.tree_util.tree_leaves((compiled.input_shardings, compiled.output_shardings)):
            for device in getattr(sharding, "device_set", ()):
                found[device.id] = device
    except Exception:
        return []
    return [found[i] for i in sorted(found)]


class _MemoryAnalysis:
    """``compiled.memory_analysis()`` started in a thread of its own: :meth:`result` waits for it.

    The call is C++ that releases the GIL, so the thread that started it reads
    the rest of the variant meanwhile. A compile stopped early answers it from its
    dump in Python (:func:`fieldmem.driver.early.stood_in`): that is called here, as a
    thread would only add its start to the time. A call that raised is handed back as
    the exception, for :func:`read_memory` to say why the figures are missing.
    """

    def __init__(self, compiled: Any) -> None:
        self._value: Any = None
        self._thread: threading.Thread | None = None
        if stood_in(compiled):
            self._call(compiled)
            return
        self._thread = threading.Thread(target=self._call, args=(compiled,), name="fieldmem-memory-analysis")
        self._thread.start()

    def _call(self, compiled: Any) -> None:
        try:
            self._value = compiled.memory_analysis()
        except Exception as exc:  # some backends raise instead of returning None
            self._value = exc

    def result(self) -> Any:
        if self._thread is not None:
            self._thread.join()
        return self._value


def read_memory(compiled: Any, fast: bool = False, started: _MemoryAnalysis | None = None) -> MemoryReading:
    """``memory_analysis()`` read in one place, once per compile (``started``: the call, already under way).

    A missing figure is None with a reason; so is one that a fast compile
    (``fast``) changes (:data:`FAST_COMPILE_UNAVAILABLE`). The serialized buffer assignment
    and the HLO module proto feed fieldmem.xla.buffers (recent XLA names a logical
    buffer's instruction only by id; the module proto maps ids to names).
    """

    figures: dict[str, int | None] = {}
    unavailable: dict[str, str] = {}
    started = started if started is not None else _MemoryAnalysis(compiled)
    from_dump = dumps.is_dumped(compiled)  # an accelerator's compile: the module and assignment are in XLA's dump
    # the module proto is serialized while the analysis runs (C++ that holds the GIL); a dumped
    # compile's comes from its dump, and is not serialized here at all
    module_proto = None if from_dump else _module_proto(compiled)
    analysis = started.result()
    if isinstance(analysis, Exception):
        reason = f"memory_analysis() failed on this backend: {type(analysis).__name__}: {analysis}"
        analysis = None
    else:
        reason = "memory_analysis() returned nothing on this backend"
    for name, attribute in MEMORY_FIELDS.items():
        value = getattr(analysis, attribute, None) if analysis is not None else None
        if value is None:
            figures[name] = None
            unavailable[name] = reason if analysis is None else f"memory_analysis() has no {attribute} in this jaxlib"
        else:
            figures[name] = int(value)
    if fast:
        for name, why in FAST_COMPILE_UNAVAILABLE.items():
            figures[name] = None
            unavailable[name] = why
    notes = dumps.compile_notes(compiled)
    if notes is not None and notes.target is not None and notes.platform == "gpu":
        for name, why in DEVICELESS_GPU_UNAVAILABLE.items():
            figures[name] = None
            unavailable[name] = why
    doubted = _doubted(compiled)
    if doubted is not None:  # XLA said its own calculation is wrong: what it planned is not told
        for name in DOUBTED_FIGURES:
            figures[name] = None
            unavailable[name] = doubted
        return MemoryReading(figures, unavailable, None, None, doubted)

    assignment = getattr(analysis, "serialized_buffer_assignment_proto", None) if analysis is not None else None
    if not assignment:
        if from_dump:  # memory_analysis() through the PJRT C API has no assignment: the dump has it
            dump = dumps.dumped(compiled)
            if dump:
                return MemoryReading(figures, unavailable, None, None, None, hlo_proto=dump)
            why = CACHE_LOADED if notes is not None and notes.loaded else NOTHING_DUMPED
            return MemoryReading(figures, unavailable, None, None, why)
        missing = (
            reason if analysis is None else "memory_analysis() has no serialized_buffer_assignment_proto in this jaxlib"
        )
        return MemoryReading(figures, unavailable, None, None, missing)
    if from_dump:  # a dumped compile whose analysis has the assignment after all
        module_proto = _module_proto(compiled)
    return MemoryReading(figures, unavailable, bytes(assignment), module_proto, None)


#: the figures XLA's plan decides (the schedule and the buffer assignment), unavailable when XLA says its own
#: calculation is wrong; the arguments', outputs' and aliases' sizes are the call's and stay
DOUBTED_FIGURES = ("temp_bytes", "peak_bytes", "host_temp_bytes")


def _doubted(compiled: Any) -> str | None:
    """Why ``compiled``'s planned figures are not told, when XLA logged while compiling it that its own
    calculation is wrong (:data:`fieldmem.driver.dumps.XLA_DOUBTS`); None when it did not."""

    notes = dumps.compile_notes(compiled)
    if notes is None or not notes.doubts:
        return None
    line = notes.doubts[0]
    said = line.split("] ", 1)[1] if "] " in line else line  # without absl's prefix (time, thread, file)
    return f"XLA said while compiling that its own calculation is wrong: {said}"


def _module_proto(compiled: Any) -> bytes | None:
    """The compiled ``HloModuleProto``, serialized (None where jax gives none: a deviceless compile's comes
    from XLA's dump; older XLA still names instructions in the assignment itself)."""
    try:
        return compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:
        return None


def _kept_var_idx(lowered: Any) -> tuple[set[int] | None, bool]:
    try:
        compile_args = lowered._lowering.compile_args
    except AttributeError:
        return None, False
    kept = compile_args.get("kept_var_idx")
    return (set(kept) if kept is not None else None), bool(compile_args.get("tuple_args", False))


def _donated_argument_names(call: PreparedCall, lowered: Any, inputs: tuple[InputLeaf, ...]) -> tuple[str, ...]:
    import jax

    if call.leaf_names is not None:  # a wrapper's program: its donated leaves name the user's arguments
        return tuple(dict.fromkeys(leaf.argument for leaf in inputs if leaf.donated))

    names = call.positional_names
    # read what jax actually donates (the user's jit object may donate by name)
    donated: list[str] = []
    positional_info, keyword_info = lowered.args_info
    dyn_positional = [i for i in range(len(call.args)) if i not in call.static_positions]
    for i, info in zip(dyn_positional, positional_info):
        leaves = jax.tree_util.tree_leaves(info, is_leaf=lambda x: hasattr(x, "donated"))
        if leaves and any(getattr(leaf, "donated", False) for leaf in leaves):
            donated.append(names[i])
    for key in call.kwargs:
        if key in keyword_info:
            leaves = jax.tree_util.tree_leaves(keyword_info[key], is_leaf=lambda x: hasattr(x, "donated"))
            if leaves and any(getattr(leaf, "donated", False) for leaf in leaves):
                donated.append(key)
    return tuple(donated)
