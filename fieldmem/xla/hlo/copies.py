"""The copies a parsed HLO module keeps, each with where it comes from and why (:func:`find_copies`).

A ``copy`` (or an asynchronous copy's start) of an entry parameter or of a
loop's carried state, with the parameter it copies, the output it becomes,
its role in a loop, a move between memory spaces, and its source line.
Takes an :class:`~.model.HloModule` built by :mod:`.parse` and returns plain
records (:class:`~.model.CopySite`). Pure, no jax.
"""

from __future__ import annotations

from dataclasses import replace

from .model import (
    CopySite,
    HloComputation,
    HloInstruction,
    HloModule,
    LoopInfo,
    SourceLocation,
    array_layout,
    memory_space,
    shape_bytes,
    tuple_elements,
)
from .queries import _SLICE_UPDATES, _TRANSPARENT, _fusion_bodies, conditional_branches, loop_bodies, reader_source

__all__ = ["find_copies"]


def _trace_parameter(name: str, by_name: dict[str, HloInstruction]) -> tuple[int | None, tuple[int, ...]]:
    """The entry parameter (number, tuple index) a value is a view of, if any."""
    index: list[int] = []
    seen = 0
    while name in by_name and seen < 64:
        seen += 1
        instruction = by_name[name]
        if instruction.opcode == "parameter":
            return instruction.parameter_number, tuple(reversed(index))
        if instruction.opcode == "tuple" and index:
            # get-tuple-element(tuple(a, b), 1) is b (XLA:GPU leaves such pairs in the entry)
            position = index.pop()
            if position >= len(instruction.operands):
                return None, ()
            name = instruction.operands[position]
            continue
        if instruction.opcode not in _TRANSPARENT or not instruction.operands:
            return None, ()
        if instruction.opcode == "get-tuple-element" and instruction.tuple_index is not None:
            index.append(instruction.tuple_index)
        name = instruction.operands[0]
    return None, ()


def _output_positions(
    name: str, computation: HloComputation, by_name: dict[str, HloInstruction]
) -> tuple[tuple[int, ...], ...]:
    """Output tuple indices at which the value ``name`` is returned directly."""
    root = computation.root
    if root is None:
        return ()
    if root.name == name:
        return ((),)
    positions: list[tuple[int, ...]] = []

    def walk(instr: HloInstruction, prefix: tuple[int, ...]) -> None:
        if instr.opcode != "tuple":
            return
        for i, operand in enumerate(instr.operands):
            if operand == name:
                positions.append(prefix + (i,))
            elif operand in by_name:
                walk(by_name[operand], prefix + (i,))

    walk(root, ())
    return tuple(positions)


def find_copies(module: HloModule, device: frozenset[int] = frozenset({0})) -> list[CopySite]:
    """Every ``copy``/``copy-start`` XLA kept, with what it copies and where.

    ``device``: the memory spaces that are the device's own memory (:func:`fieldmem.xla.spaces.device_spaces`:
    0 alone but on a GPU); a copy whose result lies in another (a TPU's VMEM, the host's memory) is
    ``staging``, as is the copy back of a value computed there into its own buffer.

    The source line is the copy's own metadata when it has one; XLA usually
    inserts copies without metadata, so it falls back to the instruction that
    produced the copied value, then to the first instruction that reads the
    copy (for a copied input that is the update which needed it);
    ``source_role`` says which ("copy", "operand", "user"). A copy that is
    returned as an output is marked ``feeds_output``. An async copy is
    reported once, at its ``copy-start``; what reads or returns it is its
    ``copy-done``. Copies inside fusion bodies are register moves, not
    buffers, and are left out. A copy in a while body or condition (or in
    anything they call) has ``loop`` set, for the innermost loop; one in a
    conditional's branch (or in anything it calls) has ``branch`` set, for the
    innermost conditional; one in a while body says in ``carry`` whether it
    copies the carry ("old", "new") or another value (None).
    """
    loops = loop_bodies(module)
    branches = conditional_branches(module)
    bodies = _while_bodies(module)
    entry_name = module.entry.name
    # inside a fusion a copy is a register move, not a buffer of its own
    fusion_bodies = _fusion_bodies(module)
    fused = {c.name: c for c in module.computations if c.name in fusion_bodies}
    aliased = {a.output_index: a.parameter_number for a in module.aliases}
    copies: list[CopySite] = []
    for computation in module.computations:
        if computation.name in fusion_bodies:
            continue
        by_name = computation.by_name()
        users = computation.users()
        for instruction in computation.instructions:
            if instruction.opcode in ("copy", "copy-start"):
                site = _copy_site(
                    instruction,
                    computation,
                    computation.name == entry_name,
                    by_name,
                    users,
                    loops.get(computation.name),
                    fused,
                    aliased,
                    device,
                )
                carry = _carry_role(site, computation, by_name, users) if computation.name in bodies else None
                copies.append(replace(site, branch=branches.get(computation.name), carry=carry))
    return copies


def _while_bodies(module: HloModule) -> set[str]:
    """The computations that are a ``while``'s body (its second called computation)."""
    return {
        i.called[1] for c in module.computations for i in c.instructions if i.opcode == "while" and len(i.called) > 1
    }


# what an update may write into its first operand's buffer in place
_IN_PLACE = ("fusion", "dynamic-update-slice", "scatter")


def _carry_role(
    site: CopySite,
    body: HloComputation,
    by_name: dict[str, HloInstruction],
    users: dict[str, list[HloInstruction]],
) -> str | None:
    """In a while body: "old" when the copy copies the carry the body was given (its
    operand is the body's parameter, or elements of it), "new" when the copy becomes
    the carry the body returns (it reaches the root tuple through views and the
    updates written into its buffer), else None."""
    operand = by_name.get(site.operand or "")
    seen = 0
    while operand is not None and operand.opcode == "get-tuple-element" and operand.operands and seen < 16:
        seen += 1
        operand = by_name.get(operand.operands[0])
    if operand is not None and operand.opcode == "parameter":
        return "old"
    root = body.root
    copied = site.instruction
    done = [u for u in users.get(copied, []) if u.opcode == "copy-done"]
    frontier = [done[0].name if done else copied]
    reached: set[str] = set()
    while frontier and len(reached) < 64:
        name = frontier.pop()
        if root is not None and name == root.name:
            return "new"
        if name in reached:
            continue
        reached.add(name)
        for user in users.get(name, []):
            if user.opcode in ("tuple", "bitcast") or (
                user.opcode in _IN_PLACE and user.operands and user.operands[0] == name
            ):
                frontier.append(user.name)
    return None


def _copy_site(
    instruction: HloInstruction,
    computation: HloComputation,
    in_entry: bool,
    by_name: dict[str, HloInstruction],
    users: dict[str, list[HloInstruction]],
    loop: LoopInfo | None,
    fused: dict[str, HloComputation] | None = None,
    aliased: dict[tuple[int, ...], int] | None = None,
    device: frozenset[int] = frozenset({0}),
) -> CopySite:
    """What one ``copy``/``copy-start`` copies, from where, to which outputs (``device``: as
    :func:`find_copies` takes it)."""
    fused = fused or {}
    aliased = aliased or {}
    operand = instruction.operands[0] if instruction.operands else None
    parameter_number: int | None = None
    parameter_index: tuple[int, ...] = ()
    if operand is not None and in_entry:
        parameter_number, parameter_index = _trace_parameter(operand, by_name)
    shape = instruction.shape
    if instruction.opcode == "copy-start":
        # copy-start returns (destination, source, context): the copied array is element 0
        elements = tuple_elements(shape)
        shape = elements[0] if elements else shape
    operand_shape = by_name[operand].shape if operand in by_name else None
    if instruction.opcode == "copy-start" and len(tuple_elements(instruction.shape)) > 1:
        operand_shape = tuple_elements(instruction.shape)[1]  # element 1 is the source, as it is read
    source_space = memory_space(operand_shape) if operand_shape is not None else 0
    space = memory_space(shape)
    layout_change = bool(
        operand_shape is not None
        and array_layout(operand_shape) is not None
        and array_layout(shape) is not None
        and array_layout(operand_shape) != array_layout(shape)
    )
    # an async copy's value is its copy-done: that is what is read and returned
    copied = instruction.name
    if instruction.opcode == "copy-start":
        done = [u for u in users.get(instruction.name, []) if u.opcode == "copy-done"]
        copied = done[0].name if done else copied
    source, role = _copy_source(instruction, operand, copied, by_name, users, fused)
    outputs = _output_positions(copied, computation, by_name) if in_entry else ()
    staging, moved, moved_index = _memory_space_move(
        space, source_space, operand, by_name, fused, outputs, aliased if in_entry else {}, device
    )
    if moved is not None and in_entry:
        parameter_number, parameter_index = moved, moved_index
    return CopySite(
        instruction=instruction.name,
        computation=computation.name,
        shape=shape,
        bytes=shape_bytes(shape),
        operand=operand,
        parameter_number=parameter_number,
        parameter_index=parameter_index,
        layout_change=layout_change,
        loop=loop,
        source=source,
        source_role=role,
        feeds_output=bool(outputs),
        output_indices=outputs,
        source_memory_space=source_space,
        memory_space=space,
        staging=staging,
    )


def _memory_space_move(
    space: int,
    source_space: int,
    operand: str | None,
    by_name: dict[str, HloInstruction],
    fused: dict[str, HloComputation],
    outputs: tuple[tuple[int, ...], ...],
    aliased: dict[tuple[int, ...], int],
    device: frozenset[int] = frozenset({0}),
) -> tuple[bool, int | None, tuple[int, ...]]:
    """Whether a copy only stages a value through another memory space, and for a copy
    back into the device's memory that is not staging, the entry parameter it copies.

    A copy whose result lies outside the device's memory (``device``: 0, and a GPU's
    collective memory) stages: a prefetch into a TPU's VMEM (``S(1)``), a scalar into its
    scalar memory, a relayout inside VMEM, an offload to the host. A copy back into the
    device's memory of a value that came from an entry parameter (through views, copies and
    updates written in place: a TPU copies an input into VMEM, updates it there and copies
    it out) is the copy of that parameter, unless it returns the value into the parameter's
    own buffer (a donated one, aliased to the output): that stages too, as does the copy
    back of any other value computed outside the device's memory.
    """
    if space not in device:
        return True, None, ()
    if source_space in device:
        return False, None, ()
    parameter = _updated_parameter(operand, by_name, fused)
    if parameter is None:
        return True, None, ()
    number, index = parameter
    if any(aliased.get(position) == number for position in outputs):
        return True, None, ()
    return False, number, index


def _updated_parameter(
    name: str | None, by_name: dict[str, HloInstruction], fused: dict[str, HloComputation]
) -> tuple[int, tuple[int, ...]] | None:
    """The entry parameter whose buffer ``name`` holds, through views, copies and in-place
    updates (a ``dynamic-update-slice``/``scatter`` of it, or a fusion whose root is one)."""
    index: list[int] = []
    seen = 0
    while name is not None and name in by_name and seen < 64:
        seen += 1
        instruction = by_name[name]
        if instruction.opcode == "parameter":
            return (instruction.parameter_number or 0), tuple(reversed(index))
        if not instruction.operands:
            return None
        if instruction.opcode == "get-tuple-element" and instruction.tuple_index is not None:
            index.append(instruction.tuple_index)
        elif instruction.opcode == "fusion":
            body = fused.get(instruction.called[0]) if instruction.called else None
            root = body.root if body is not None else None
            if root is None or root.opcode not in _SLICE_UPDATES or not root.operands:
                return None
            updated = body.by_name().get(root.operands[0]) if body is not None else None
            if updated is None or updated.opcode != "parameter" or updated.parameter_number is None:
                return None
            if updated.parameter_number >= len(instruction.operands):
                return None
            name = instruction.operands[updated.parameter_number]
            continue
        elif instruction.opcode not in (*_TRANSPARENT, *_SLICE_UPDATES):
            return None
        name = instruction.operands[0]
    return None


def _fusion_source(instruction: HloInstruction, fused: dict[str, HloComputation]) -> SourceLocation | None:
    """The line a fusion's value was written at, read inside it: its slice update's, else its root's, else
    the first line any of its instructions has."""
    if instruction.opcode != "fusion" or not instruction.called:
        return None
    body = fused.get(instruction.called[0])
    if body is None:
        return None
    inside = body.instructions
    for wanted in (
        lambda i: i.opcode in _SLICE_UPDATES,
        lambda i: i.is_root,
        lambda i: True,
    ):
        for candidate in inside:
            if candidate.source is not None and wanted(candidate):
                return candidate.source
    return None


def _copy_source(
    instruction: HloInstruction,
    operand: str | None,
    copied: str,
    by_name: dict[str, HloInstruction],
    users: dict[str, list[HloInstruction]],
    fused: dict[str, HloComputation] | None = None,
) -> tuple[SourceLocation | None, str | None]:
    """A copy's source line and its role: its own, its operand's (for a fusion XLA printed without one, the
    line of the update or the root inside it: the user's ``.at[].set``, not the function's ``def``), else
    its first reader's (the reader of the ``copy-done`` for an async copy)."""
    source, role = instruction.source, "copy" if instruction.source else None
    if source is None and operand in by_name and by_name[operand].opcode != "parameter":
        found = by_name[operand]
        source = found.source or _fusion_source(found, fused or {})
        role = "operand" if source else None
    if source is None:
        source = reader_source(instruction.name, users)
        role = "user" if source is not None else None
    if source is None and copied != instruction.name:
        source = reader_source(copied, users)
        role = "user" if source is not None else None
    return source, role
