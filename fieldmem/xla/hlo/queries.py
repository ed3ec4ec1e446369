"""What the findings ask of a parsed HLO module: copies, loops, outputs, sources, in-place updates.

Every function takes an :class:`~.model.HloModule` (or one of its computations)
built by :mod:`.parse` and returns plain records. Pure, no jax: nothing here
reads text other than a ``while`` loop's ``backend_config`` (its known trip count).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Literal, TypeVar

from .model import (
    BranchInfo,
    ConstantSite,
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
from .text import unquote

__all__ = [
    "OldValueUse",
    "conditional_branches",
    "find_constants",
    "find_copies",
    "loop_bodies",
    "old_value_use",
    "output_parameters",
    "output_values",
    "reader_source",
    "slice_update_kind",
    "view_source",
]


# ----------------------------------------------------------------------------
# Loops


def loop_bodies(module: HloModule) -> dict[str, LoopInfo]:
    """Computations run once per iteration of a while loop, with that loop's facts.

    A computation called (directly or through fusions, calls and nested
    loops) from a while body or condition is counted as in the loop; the
    innermost loop wins. A nested loop's :class:`LoopInfo` names the loop
    around it in ``outer``, and ``total_trip_count`` multiplies them out.
    """

    def scope(
        instruction: HloInstruction, computation: HloComputation, _: int, loop: LoopInfo | None
    ) -> LoopInfo | None:
        return _loop_info(instruction, computation.name, loop) if instruction.opcode == "while" else loop

    return _innermost(module, scope)


_Scope = TypeVar("_Scope", LoopInfo, BranchInfo)


def _innermost(
    module: HloModule,
    scope: Callable[[HloInstruction, HloComputation, int, _Scope | None], _Scope | None],
) -> dict[str, _Scope]:
    """Each computation's innermost enclosing scope (a loop, a branch), walking the calls.

    ``scope(instruction, computation, i, outer)`` is the scope of the ``i``-th
    computation ``instruction`` calls, given the ``outer`` one it runs in. The
    walk starts at the entry (so nested scopes see their outer one), then takes
    anything the entry does not reach; a computation reached again in an equal
    scope is not walked again, and the deepest scope wins.
    """
    by_name = {c.name: c for c in module.computations}
    result: dict[str, _Scope] = {}
    visited: set[tuple[str, _Scope | None]] = set()

    def visit(name: str, outer: _Scope | None) -> None:
        if (name, outer) in visited or name not in by_name:
            return
        visited.add((name, outer))
        if outer is not None and (name not in result or outer.depth > result[name].depth):
            result[name] = outer
        computation = by_name[name]
        for instruction in computation.instructions:
            for i, callee in enumerate(instruction.called):
                visit(callee, scope(instruction, computation, i, outer))

    for computation in sorted(module.computations, key=lambda c: not c.is_entry):
        visit(computation.name, None)
    return result


def _loop_info(instruction: HloInstruction, computation: str, outer: LoopInfo | None = None) -> LoopInfo:
    """The facts of one ``while``; its trip count is XLA's ``known_trip_count`` when printed."""
    trip_count: int | None = None
    config = instruction.backend_config
    if config:
        text = config
        if text.startswith('"'):
            text = unquote(text)
        try:
            data = json.loads(text)
            trip_count = int(data["known_trip_count"]["n"])
        except (ValueError, KeyError, TypeError):
            found = re.search(r'known_trip_count[^0-9]*?"?n"?\s*[:=]\s*"?(\d+)', text)
            trip_count = int(found.group(1)) if found else None
    return LoopInfo(
        instruction=instruction.name,
        computation=computation,
        trip_count=trip_count,
        source=instruction.source,
        outer=outer,
    )


def conditional_branches(module: HloModule) -> dict[str, BranchInfo]:
    """Computations that run only when a branch of a ``conditional`` is taken, with that branch.

    A branch computation, and what it calls (fusions, calls, loops), belongs to
    its branch; the innermost conditional wins. A conditional inside a loop body
    is found like any other: its branches run in the iterations that take them.
    """

    def scope(
        instruction: HloInstruction, computation: HloComputation, i: int, branch: BranchInfo | None
    ) -> BranchInfo | None:
        return _branch_info(instruction, computation, i, branch) if instruction.opcode == "conditional" else branch

    return _innermost(module, scope)


def _branch_info(
    conditional: HloInstruction, computation: HloComputation, index: int, outer: BranchInfo | None
) -> BranchInfo:
    """Branch ``index`` of ``conditional``: "true"/"false" on a predicate (the parser lists
    ``true_computation`` first), else the index."""
    selector = computation.by_name().get(conditional.operands[0]) if conditional.operands else None
    on_predicate = selector is not None and selector.shape.startswith("pred[")
    label = ("true", "false")[index] if on_predicate and index < 2 else str(index)
    return BranchInfo(
        conditional=conditional.name,
        computation=computation.name,
        branch=label,
        branches=len(conditional.called),
        source=conditional.source,
        depth=1 + (outer.depth if outer is not None else 0),
    )


# ----------------------------------------------------------------------------
# Copies

# views and copies of a value: what they hold comes from their first operand
_TRANSPARENT = ("bitcast", "get-tuple-element", "copy", "copy-start", "copy-done")


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


def find_constants(module: HloModule) -> list[ConstantSite]:
    """Every ``constant`` that has a buffer of its own: those outside fusion bodies (a constant inside a
    fusion is an immediate of the fused code), in the entry, loop bodies and any other computation.

    On XLA:CPU (jax 0.10.2) their bytes are exactly the constant allocations of the
    buffer assignment (tests/test_sources.py compares them), including the constants
    XLA derives from a closed-over array (a transposed copy of it is a second
    constant).
    """
    fusion_bodies = _fusion_bodies(module)
    constants: list[ConstantSite] = []
    for computation in module.computations:
        if computation.name in fusion_bodies:
            continue
        users: dict[str, list[HloInstruction]] | None = None
        for instruction in computation.instructions:
            if instruction.opcode != "constant":
                continue
            source, role = instruction.source, "constant" if instruction.source is not None else None
            if source is None:
                users = users if users is not None else computation.users()
                source = reader_source(instruction.name, users)
                role = "user" if source is not None else None
            constants.append(
                ConstantSite(
                    instruction=instruction.name,
                    computation=computation.name,
                    shape=instruction.shape,
                    bytes=instruction.bytes,
                    source=source,
                    source_role=role,
                )
            )
    return constants


def reader_source(name: str, users: dict[str, list[HloInstruction]]) -> SourceLocation | None:
    """Source of the nearest reader of ``name``, looking through tuples and views.

    ``users`` is :meth:`HloComputation.users` of the computation holding ``name``.
    XLA inserts copies without metadata; the line of the update that reads one
    is what the user can act on.
    """
    frontier = [name]
    seen = {name}
    for _depth in range(4):
        following: list[str] = []
        for value in frontier:
            for user in users.get(value, []):
                if user.source is not None:
                    return user.source
                if user.opcode in ("tuple", "bitcast", "get-tuple-element") and user.name not in seen:
                    seen.add(user.name)
                    following.append(user.name)
        frontier = following
    return None


def _fusion_bodies(module: HloModule) -> set[str]:
    """Computations that are the inside of a fusion (no buffers of their own)."""
    by_name = {c.name: c for c in module.computations}
    frontier: list[str] = []
    for computation in module.computations:
        for instruction in computation.instructions:
            if instruction.opcode == "fusion":
                frontier.extend(instruction.called)
    bodies: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name in bodies or name not in by_name:
            continue
        bodies.add(name)
        for instruction in by_name[name].instructions:
            frontier.extend(instruction.called)
    return bodies


def output_values(module: HloModule) -> list[HloInstruction | None]:
    """The entry instruction that produces each output leaf, in output order.

    jax returns a flat tuple of leaves; a non-tuple root is a single output.
    """
    entry = module.entry
    by_name = entry.by_name()
    root = entry.root
    if root is None:
        return []
    if root.opcode != "tuple":
        return [root]
    return [by_name.get(operand) for operand in root.operands]


_SLICE_UPDATES = ("dynamic-update-slice", "scatter")


def slice_update_kind(module: HloModule, instruction: HloInstruction | None) -> str | None:
    """``dynamic-update-slice`` or ``scatter`` when ``instruction``'s value is such an update of a
    buffer (directly, as a fusion's root, or as a loop's carry updated so in the body), else None.

    These are the outputs whose HLO looks in place while writing only a slice: the in-place probe
    (``--probe``) times them.
    """
    by_computation = {c.name: c for c in module.computations}
    seen: set[tuple[str, int | None]] = set()
    current, index = instruction, None  # index: the tuple element followed into a tuple-valued root
    computation_of: dict[str, HloComputation] = {}
    while current is not None and (current.name, index) not in seen:
        seen.add((current.name, index))
        if current.opcode in _SLICE_UPDATES and index is None:
            return current.opcode
        if current.opcode == "get-tuple-element" and current.operands and index is None:
            index = current.tuple_index
            current = _find(module, current.operands[0], computation_of)
            continue
        if current.opcode == "tuple" and index is not None and index < len(current.operands):
            current, index = _find(module, current.operands[index], computation_of), None
            continue
        if current.opcode in ("fusion", "while"):
            bodies = [by_computation[c] for c in current.called if c in by_computation]
            if current.opcode == "while":
                bodies = [b for b in bodies if b.root is not None and b.root.shape == current.shape]
            if not bodies or bodies[0].root is None:
                return None
            body = bodies[0]
            for member in body.instructions:
                computation_of[member.name] = body
            current = body.root
            continue
        return None
    return None


# why a donated parameter's old value is kept beside its update (see old_value_use)
OldValueUse = Literal["returned", "read-after-update", "scheduling"]
# instructions whose value is a parameter's old value itself (a view or a copy of it)
_OLD_VALUE_VIEWS = ("bitcast", "copy", "copy-start", "copy-done")


def old_value_use(module: HloModule, parameter_number: int) -> OldValueUse | None:
    """Why the entry keeps parameter ``parameter_number``'s old value while an output reusing its buffer
    (``input_output_alias``) is written: a copy of a donated input is needed only for a reason in the program.

    - ``returned``: the old value (or a copy or view of it) is itself an output, beside the update;
    - ``read-after-update``: an instruction reads the old value and also depends on the updated one, so it must
      run after the update has overwritten the buffer;
    - ``scheduling``: neither: every read of the old value could run before the update, so a copy kept for it
      is the compiler's choice of order, not something the program asks for.

    None when the parameter has no alias or the update that writes it cannot be found.
    """
    entry = module.entry
    by_name, users = entry.by_name(), entry.users()
    root = entry.root
    parameter = next(
        (i for i in entry.instructions if i.opcode == "parameter" and i.parameter_number == parameter_number), None
    )
    outputs = [
        a.output_index for a in module.aliases if a.parameter_number == parameter_number and not a.parameter_index
    ]
    if parameter is None or root is None or not outputs:
        return None
    writers: list[HloInstruction] = []
    for index in outputs:
        if index == () and root.opcode != "tuple":
            writers.append(root)
        elif len(index) == 1 and root.opcode == "tuple" and index[0] < len(root.operands):
            found = by_name.get(root.operands[index[0]])
            if found is not None:
                writers.append(found)
    if not writers:
        return None
    # the update's own producers: a bitcast or tuple element of the written value is the same write
    producers: list[HloInstruction] = []
    for writer in writers:
        current: HloInstruction | None = writer
        while current is not None and current not in producers:
            producers.append(current)
            if current.opcode not in ("bitcast", "get-tuple-element") or not current.operands:
                break
            current = by_name.get(current.operands[0])
    old = {parameter.name}
    frontier = [parameter.name]
    while frontier:
        for user in users.get(frontier.pop(), ()):
            if user.opcode in _OLD_VALUE_VIEWS and user.name not in old and user not in producers:
                old.add(user.name)
                frontier.append(user.name)
    if any(operand in old for operand in root.operands if root.opcode == "tuple") or root.name in old:
        return "returned"
    after: set[str] = set()
    frontier = [p.name for p in producers]
    while frontier:
        for user in users.get(frontier.pop(), ()):
            if user.name not in after and user is not root:
                after.add(user.name)
                frontier.append(user.name)
    readers = {u.name for name in old for u in users.get(name, ()) if u.name not in old}
    return "read-after-update" if readers & after else "scheduling"


def _find(module: HloModule, name: str, hint: dict[str, HloComputation]) -> HloInstruction | None:
    if name in hint:
        return hint[name].by_name().get(name)
    return module.entry.by_name().get(name)


def output_parameters(module: HloModule) -> list[frozenset[tuple[int, tuple[int, ...]]]]:
    """For each output leaf, the entry parameters its value is computed from.

    Each is ``(parameter_number, index)``: ``index`` is ``()`` for an array
    parameter and ``(k,)`` for element ``k`` of a tuple parameter read through
    ``get-tuple-element``. The walk follows operands inside the entry
    computation only, so a fusion, call or loop counts as reading everything
    passed to it (a superset, never a miss). The donation advisor prefers to
    pair an output with an input it is computed from.
    """
    entry = module.entry
    by_name = entry.by_name()
    memo: dict[str, frozenset[tuple[int, tuple[int, ...]]]] = {}

    def reads(start: HloInstruction) -> frozenset[tuple[int, tuple[int, ...]]]:
        found: set[tuple[int, tuple[int, ...]]] = set()
        stack, seen = [start], set()
        while stack:
            instruction = stack.pop()
            if instruction.name in seen:
                continue
            seen.add(instruction.name)
            if instruction.name in memo:
                found |= memo[instruction.name]
                continue
            if instruction.opcode == "parameter" and instruction.parameter_number is not None:
                found.add((instruction.parameter_number, ()))
                continue
            if instruction.opcode == "get-tuple-element" and instruction.tuple_index is not None:
                operand = by_name.get(instruction.operands[0]) if instruction.operands else None
                if operand is not None and operand.opcode == "parameter" and operand.parameter_number is not None:
                    found.add((operand.parameter_number, (instruction.tuple_index,)))
                    continue
            stack.extend(by_name[o] for o in instruction.operands if o in by_name)
        result = frozenset(found)
        memo[start.name] = result
        return result

    return [reads(value) if value is not None else frozenset() for value in output_values(module)]


def view_source(
    instruction: HloInstruction | None,
    by_name: dict[str, HloInstruction],
    views: tuple[str, ...] = _TRANSPARENT,
) -> SourceLocation | None:
    """Source line of a value in one computation, looking through the ``views`` opcodes."""
    seen = 0
    while instruction is not None and seen < 16:
        seen += 1
        if instruction.source is not None:
            return instruction.source
        if instruction.opcode not in views or not instruction.operands:
            return None
        instruction = by_name.get(instruction.operands[0])
    return None
