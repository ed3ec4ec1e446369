"""What jax copies onto the devices before every call: the ``transfers`` section, its findings, and the
donations lost to a move.

jax hands a compiled program its arguments where its input shardings say. The driver reads, per argument
leaf, where the example argument is against where the program takes it (:class:`~fieldmem.model.readings.Placement`);
this module says what that costs:

- a leaf given elsewhere is copied there before **every** call: from the host (a NumPy array, a Python
  number the program takes as an array), across devices (an uncommitted array on one device for a program
  sharded over several: jax moves it), or across memory kinds. Each is a :class:`~fieldmem.model.transfers.Transfer`
  with the bytes written onto the devices and the fix, and a ``transfer`` finding when it is at least
  ``min_bytes`` on one device (a warning for a move between devices or memories, which the user can avoid
  once and for all; a note for a copy from the host);
- a donated leaf so moved on the devices whose buffer the plan reuses is a ``resharded-donation`` error: jax
  donates the moved copy, the output takes the copy's buffer, and the leaf's own buffer stays alive beside
  it. ``--run`` agrees: the leaf is not deleted, and the alias is not confirmed. A NumPy array donated is
  copied too, but its own buffer is on the host: the device memory is reused as planned, and it is a
  transfer only;
- one array given twice in the call (``f(x, x)``, the same buffer under two paths), donated under a path whose
  buffer the plan reuses, is a ``shared-donation`` error (:func:`shared_buffer_findings`): jax refuses a call
  that donates a buffer it also gives again (``INVALID_ARGUMENT`` at the call; over several devices jax 0.10.2
  on CPU kills the process instead), so the donated call fails with these arguments. A leaf of the group the program does not take (jit dropped it) is not given;
  a donation nothing reuses is not made, and then nothing fails: the array is a ``shared-argument`` note,
  since XLA's figures count it once per parameter while the devices hold it once;
- the leaves the program takes or returns in a host memory kind (``pinned_host``: offloaded) are named with
  their bytes, beside XLA's ``host_*`` figures; where XLA gives those 0 although the program holds such
  leaves (XLA:CPU counts host memory in its device figures), the figures are read from the program's own
  shardings instead, and say so (:func:`host_figures`).

It never imports jax and never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fieldmem.model.copies import Alias
from fieldmem.model.memory import HostFromShardings, MemoryFigures
from fieldmem.model.readings import CompiledVariant, InputLeaf, OutputLeaf, Placement, RunReading, shared_buffers
from fieldmem.model.transfers import Transfer, TransferRun, Transfers
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Finding
from fieldmem.model.word_sets import TransferKind

__all__ = [
    "HOST_MEMORY_KINDS",
    "given_again",
    "host_figures",
    "is_host_memory",
    "shared_buffer_findings",
    "shared_buffers",
    "transfer_findings",
    "transfer_run",
    "transfers_of",
]

#: the memory kinds that are the host's: a leaf in one is offloaded from the device
HOST_MEMORY_KINDS = ("pinned_host", "unpinned_host")

_KINDS: dict[str, TransferKind] = {
    "host-to-device": "host-to-device",
    "across-devices": "across-devices",
    "memory-kind": "memory-kind",
}


def is_host_memory(kind: str | None) -> bool:
    """Whether memory kind ``kind`` is the host's (a leaf in it is offloaded)."""
    return kind in HOST_MEMORY_KINDS


def _given(placement: Placement) -> str:
    """Where a leaf is given, in words."""
    if placement.given == "numpy":
        return "a NumPy array on the host"
    if placement.given == "scalar":
        return "a Python number on the host"
    where = placement.where or "another placement"
    return f"on {where} (uncommitted)" if placement.given == "uncommitted" else f"on {where}"


def _fix(kind: TransferKind, placement: Placement) -> str:
    """The fix of one transfer, in words (the message says where the program takes it)."""
    if kind == "across-devices":
        return (
            "put it where the program takes it once, before the calls (jax.device_put to that sharding, which "
            "compiled.input_shardings gives), or make it with that sharding"
        )
    if kind == "memory-kind":
        return "put it in that memory once (jax.device_put to that sharding), or make it there"
    if placement.given == "scalar":
        return "pass it as a jax array made once on the devices, or mark it static if it seldom changes"
    return (
        "where it is the same on every call, put it on the devices once (jax.device_put to that sharding); a new "
        "one each call (a batch) is copied anyway: put the next one on the devices before the call, so the copy "
        "overlaps the compute"
    )


def transfers_of(
    variant: CompiledVariant,
    aliases: Sequence[Alias],
    input_bytes: Mapping[int, int],
    output_bytes: Mapping[int, int],
) -> Transfers | None:
    """The ``transfers`` section of the donated ``variant`` (its plan's ``aliases``; ``input_bytes`` and
    ``output_bytes``: each leaf's bytes per device in the program), or None where nothing is copied and
    nothing is held in host memory."""
    reused = {a.input_index for a in aliases}
    leaves: list[Transfer] = []
    for leaf in variant.inputs:
        placement = leaf.placement
        if leaf.hlo_parameter is None or placement is None or placement.moves not in _KINDS:
            continue
        kind = _KINDS[placement.moves]
        leaves.append(
            Transfer(
                input=leaf.path,
                input_index=leaf.index,
                kind=kind,
                given=_given(placement),
                wanted=leaf.sharding,
                bytes=placement.bytes,
                device_bytes=placement.device_bytes,
                devices=max(placement.devices, 1),
                donated=leaf.donated and leaf.index in reused,
                fix=_fix(kind, placement),
                held_bytes=placement.held_bytes,
            )
        )
    host_in = [leaf for leaf in variant.inputs if leaf.hlo_parameter is not None and is_host_memory(leaf.memory_kind)]
    host_out = [out for out in variant.outputs if is_host_memory(out.memory_kind)]
    if not leaves and not host_in and not host_out:
        return None
    offloaded_in = sum(input_bytes.get(leaf.index, leaf.bytes) for leaf in host_in)
    offloaded_out = sum(output_bytes.get(out.index, out.bytes) for out in host_out)
    total = sum(t.bytes for t in leaves)
    leaves.sort(key=lambda t: (-t.bytes, t.input_index))  # most bytes first
    return Transfers(
        leaves=tuple(leaves),
        bytes_per_call=total,
        summary=_summary(leaves, total, host_in, host_out, offloaded_in, offloaded_out),
        offloaded_inputs=tuple(leaf.path for leaf in host_in),
        offloaded_outputs=tuple(out.path for out in host_out),
        offloaded_argument_bytes=offloaded_in,
        offloaded_output_bytes=offloaded_out,
    )


def _summary(
    leaves: Sequence[Transfer],
    total: int,
    host_in: Sequence[InputLeaf],
    host_out: Sequence[OutputLeaf],
    offloaded_in: int,
    offloaded_out: int,
) -> str:
    parts = []
    if leaves:
        kinds = {
            "host-to-device": "from the host",
            "across-devices": "across devices",
            "memory-kind": "across memory kinds",
        }
        counts = ", ".join(
            f"{sum(1 for t in leaves if t.kind == kind)} {words}"
            for kind, words in kinds.items()
            if any(t.kind == kind for t in leaves)
        )
        lost = [t for t in leaves if t.donated and t.kind != "host-to-device"]
        words = (
            f"jax copies {format_bytes(total)} onto the devices before every call "
            f"({len(leaves)} lea{'ves' if len(leaves) != 1 else 'f'}: {counts})"
        )
        if lost:
            words += (
                f"; {', '.join(t.input for t in lost)} {'is' if len(lost) == 1 else 'are'} donated as the moved "
                f"cop{'y' if len(lost) == 1 else 'ies'}, so the given buffer{'s stay' if len(lost) != 1 else ' stays'} "
                "alive: put each where the program takes it once"
            )
        else:
            words += f"; {leaves[0].input}: {leaves[0].fix}"  # the largest
        parts.append(words)
    if host_in or host_out:
        held = []
        if host_in:
            held.append(f"takes {', '.join(leaf.path for leaf in host_in)} ({format_bytes(offloaded_in)} per device)")
        if host_out:
            held.append(f"returns {', '.join(out.path for out in host_out)} ({format_bytes(offloaded_out)} per device)")
        parts.append(f"the program {' and '.join(held)} in host memory (offloaded)")
    return "; ".join(parts)


def transfer_findings(
    transfers: Transfers | None, aliases: Sequence[Alias], input_bytes: Mapping[int, int], min_bytes: int
) -> list[Finding]:
    """The findings of ``transfers``: each donation lost to a move (an error: it breaks in place), and each
    other transfer of at least ``min_bytes`` on one device (``input_bytes``: per device in the program)."""
    if transfers is None:
        return []
    outputs = {a.input_index: a.output for a in aliases}
    threshold = max(min_bytes, 1)
    findings = []
    for transfer in transfers.leaves:
        size = input_bytes.get(transfer.input_index, transfer.device_bytes)
        if size < threshold:
            continue
        copied = format_bytes(transfer.bytes) + (
            f", {format_bytes(transfer.device_bytes)} on each of {transfer.devices} devices"
            if transfer.devices > 1
            else ""
        )
        wanted = transfer.wanted or "the program's sharding"
        if transfer.donated and transfer.kind != "host-to-device":
            output = outputs.get(transfer.input_index, "its output")
            findings.append(
                Finding(
                    "error",
                    "resharded-donation",
                    f"{transfer.input} is donated, but it is given {transfer.given} and the program takes it as "
                    f"{wanted}: jax moves it there before every call ({copied}) and donates the moved copy, so "
                    f"{output} reuses the copy while {transfer.input}'s own buffer "
                    f"({format_bytes(transfer.held_bytes)}) stays alive: the donation is lost; {transfer.fix}",
                    input=transfer.input,
                    output=output,
                    bytes=max(size, transfer.held_bytes),
                )
            )
            continue
        moved = "moves it there" if transfer.kind != "host-to-device" else "copies it onto the devices"
        findings.append(
            Finding(
                "info" if transfer.kind == "host-to-device" else "warning",
                "transfer",
                f"{transfer.input} is given {transfer.given} and the program takes it as {wanted}: jax {moved} "
                f"before every call ({copied}); {transfer.fix}",
                input=transfer.input,
                bytes=transfer.device_bytes,
            )
        )
    return findings


def given_again(leaf: InputLeaf, shared: Mapping[int, tuple[InputLeaf, ...]]) -> str:
    """The other paths under which the call gives ``leaf``'s array to the program (``shared``: see
    :func:`shared_buffers`), comma-separated; empty where there are none."""
    return ", ".join(other.path for other in shared.get(leaf.index, ()) if other.index != leaf.index)


def shared_buffer_findings(
    shared: Mapping[int, tuple[InputLeaf, ...]],
    aliases: Sequence[Alias],
    input_bytes: Mapping[int, int],
    min_bytes: int,
    devices: int = 1,
) -> list[Finding]:
    """The findings of each array given more than once in the call (``shared``: the donated variant's
    :func:`shared_buffers`): a ``shared-donation`` error where jax donates it (a leaf of it that an output
    reuses, ``aliases``: the plan), of any size; else a ``shared-argument`` note, from ``min_bytes`` (on one
    device) up, that the figures count it once per leaf. ``input_bytes``: each leaf's bytes per device in the
    program; ``devices``: how many it runs on (over several, jax 0.10.2 on CPU kills the process instead of
    raising: tests/driver/test_shared_buffers.py)."""
    outputs = {a.input_index: a.output for a in aliases}
    crash = "; over several devices it can kill the process instead, as jax 0.10.2 on CPU does" if devices > 1 else ""
    findings = []
    for leaves in {group[0].index: group for group in shared.values()}.values():  # each array once
        donors = [leaf for leaf in leaves if leaf.index in outputs]
        if not donors:
            size = input_bytes.get(leaves[0].index, leaves[0].bytes)
            if size >= max(min_bytes, 1):
                paths = ", ".join(leaf.path for leaf in leaves[:-1]) + f" and {leaves[-1].path}"
                findings.append(
                    Finding(
                        "info",
                        "shared-argument",
                        f"{paths} are one array in this call: the devices hold it once, but the program takes it "
                        f"{len(leaves)} times and XLA's figures count each ({format_bytes(size * (len(leaves) - 1))} "
                        "more than this call holds)",
                        input=leaves[0].path,
                        bytes=size * (len(leaves) - 1),
                    )
                )
            continue
        donor = donors[0]
        again = ", ".join(leaf.path for leaf in leaves if leaf is not donor)
        findings.append(
            Finding(
                "error",
                "shared-donation",
                f"{donor.path} is donated and {outputs[donor.index]} reuses its buffer, but the call gives the same "
                f"array again as {again}: jax refuses a call that donates a buffer it also reads (INVALID_ARGUMENT "
                f"when it is called{crash}), so the donated call fails with these arguments; give the array once "
                f"and read it there, or pass a copy (jnp.copy) where it is given again",
                input=donor.path,
                output=outputs[donor.index],
                bytes=input_bytes.get(donor.index, donor.bytes),
            )
        )
    return findings


def transfer_run(transfers: Transfers | None, reading: RunReading, paths: Mapping[int, str]) -> TransferRun | None:
    """The donated run's logged copies (``reading``) against ``transfers``' plan; None where nothing was
    planned and nothing was logged. ``paths``: each input leaf's path, by index."""
    planned = {t.input_index: t.bytes for t in transfers.leaves} if transfers is not None else {}
    total = sum(planned.values())
    if reading.transfers_unavailable is not None or not reading.transferred:
        if not planned:
            return None
        why = reading.transfers_unavailable or "the run read no transfer"
        return TransferRun(total, None, False, f"not measured: {why}", unavailable=why)
    measured = {i: b for i, b in enumerate(reading.transferred) if b}
    if not planned and not measured and not reading.transfers_unmatched:
        return None
    logged = sum(measured.values())
    differ = [
        f"{paths.get(i, f'input {i}')}: {format_bytes(measured.get(i, 0))} (plan {format_bytes(planned.get(i, 0))})"
        for i in sorted(set(planned) | set(measured))
        if planned.get(i, 0) != measured.get(i, 0)
    ]
    agrees = not differ and not reading.transfers_unmatched
    detail = f"jax's transfer guard logged {format_bytes(logged)} copied onto the devices for the call"
    if agrees:
        detail += ", as planned"
    else:
        detail += f", the plan {format_bytes(total)}"
        if differ:
            detail += f" ({'; '.join(differ[:4])}{f'; and {len(differ) - 4} more' if len(differ) > 4 else ''})"
        if reading.transfers_unmatched:
            detail += f"; {reading.transfers_unmatched} logged cop(ies) match no argument leaf"
    return TransferRun(total, logged, agrees, detail)


def host_figures(
    memory: MemoryFigures,
    variant: CompiledVariant,
    aliases: Sequence[Alias],
    input_bytes: Mapping[int, int],
    output_bytes: Mapping[int, int],
) -> MemoryFigures:
    """``memory`` with each of XLA's ``host_*`` figures that leaves out the leaves the program holds in host
    memory (it gives 0 although some are: XLA:CPU counts them in the device figures) read from the compiled
    program's own shardings instead: the bytes per device (``input_bytes``, ``output_bytes``) of the input or
    output leaves it takes or returns in a host memory kind, and for ``host_alias_bytes`` those of the
    ``aliases`` whose input is one. Each such figure is a :class:`~fieldmem.model.memory.HostFromShardings` in
    ``host_from_shardings``, with XLA's 0 and the device figure that counts the bytes; a figure XLA gives
    (a TPU's, a GPU's) is left as it is."""
    host_in = [leaf for leaf in variant.inputs if leaf.hlo_parameter is not None and is_host_memory(leaf.memory_kind)]
    host_out = [out for out in variant.outputs if is_host_memory(out.memory_kind)]
    host_indices = {leaf.index for leaf in host_in}
    host_aliases = [a for a in aliases if a.input_index in host_indices]
    held = {
        "host_argument_bytes": (
            sum(input_bytes.get(leaf.index, leaf.bytes) for leaf in host_in),
            tuple(leaf.path for leaf in host_in),
            {leaf.memory_kind or "" for leaf in host_in},
            "argument_bytes",
            "the program's input shardings take",
        ),
        "host_output_bytes": (
            sum(output_bytes.get(out.index, out.bytes) for out in host_out),
            tuple(out.path for out in host_out),
            {out.memory_kind or "" for out in host_out},
            "output_bytes",
            "the program's output shardings return",
        ),
        "host_alias_bytes": (
            sum(a.bytes for a in host_aliases),
            tuple(a.input for a in host_aliases),
            {leaf.memory_kind or "" for leaf in host_in if leaf.index in {a.input_index for a in host_aliases}},
            "alias_bytes",
            "the outputs reuse the buffers of",
        ),
    }
    read: list[HostFromShardings] = []
    for figure, (size, paths, kinds, counted_in, how) in held.items():
        xla = getattr(memory, figure)
        if not size or xla != 0:
            continue
        names = ", ".join(paths) if len(paths) <= 4 else f"{', '.join(paths[:3])} and {len(paths) - 3} more"
        memories = " and ".join(sorted(kinds))
        device = getattr(memory, counted_in)
        where = (
            f"counts these bytes in {counted_in}, with the device's memory (as XLA:CPU does: its peaks count them too)"
            if device is not None and device >= size
            else "leaves them out of its figures"
        )
        read.append(
            HostFromShardings(
                figure=figure,
                bytes=size,
                xla_bytes=xla,
                counted_in=counted_in,
                leaves=paths,
                note=(
                    f"{how} {names} in {memories} ({format_bytes(size)} per device); memory_analysis() gives "
                    f"{figure} 0 and {where}"
                ),
            )
        )
    if not read:
        return memory
    values = {r.figure: r.bytes for r in read}
    return dataclasses.replace(
        memory,
        host_argument_bytes=values.get("host_argument_bytes", memory.host_argument_bytes),
        host_output_bytes=values.get("host_output_bytes", memory.host_output_bytes),
        host_alias_bytes=values.get("host_alias_bytes", memory.host_alias_bytes),
        unavailable={k: v for k, v in memory.unavailable.items() if k not in values},
        host_from_shardings=tuple(read),
    )
