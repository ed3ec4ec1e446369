"""What the findings ask of a parsed HLO module: loops, outputs, sources, in-place updates (copies: :mod:`.copies`).

Every function takes an :class:`~.model.HloModule` (or one of its computations)
built by :mod:`.parse` and returns plain records. Pure, no jax: nothing here
reads text other than a ``while`` loop's ``backend_config`` (its known trip count).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Literal, TypeVar

from .model import (
    BranchInfo,
    ConstantSite,
    HloComputation,
    HloInstruction,
    HloModule,
    LoopInfo,
    SourceLocation,
)
from .text import unquote

__all__ = [
    "OldValueUse",
    "conditional_branches",
    "find_constants",
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
# Constants, outputs, sources, in-place updates (the copies are in .copies)

# views and copies of a value: what they hold comes from their first operand
_TRANSPARENT = ("bitcast", "get-tuple-element", "copy", "copy-start", "copy-done")


def find_constants(module: HloModule) -> list[ConstantSite]:
    """Every ``constant`` that has a buffer of its own: those outside fusion bodies (a constant inside a
    fusion is an immediate of the fused code), in the entry, loop bodies and any other computation.

    On XLA:CPU (jax 0.10.2) their bytes are exactly the constant allocations of the
    buffer assignment (tests/findings/test_sources.py compares them), including the constants
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
