"""Each logical buffer of a decoded buffer assignment over the HLO it names: what it is and what holds it.

A :class:`ValueInfo` per XLA ``HloValue``: its instruction, shape, the
allocation :class:`Slice` it is placed in, and the source line it is said
under (its own, a fusion's fused root's, a reader's, a loop's); and, XLA's
dataflow coarsely, which values each instruction's output holds, index by
index (:class:`_Holdings`). Read by :mod:`.liveness` for the live ranges.
Pure records -> records, no jax.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from fieldmem.xla.hlo import (
    HloComputation,
    HloInstruction,
    HloModule,
    SourceLocation,
    reader_source,
    sub_shape,
    tuple_elements,
    view_source,
)

from .decode import BufferAssignment


@dataclass(frozen=True, order=True)
class Slice:
    """A piece of an allocation: ``size`` bytes at ``offset`` of allocation ``allocation``."""

    allocation: int
    offset: int
    size: int


@dataclass(frozen=True)
class ValueInfo:
    """A logical buffer mapped onto the HLO: what it is, where it lives, where it came from."""

    id: int
    instruction: str | None
    computation: str | None
    opcode: str | None
    shape_index: tuple[int, ...]
    shape: str | None
    bytes: int  # the size XLA assigned
    slice: Slice | None
    kind: str  # parameter / aliased / output / temporary / constant / thread_local / unassigned
    source: SourceLocation | None
    # "own": the instruction's (or what it views'); "user": XLA wrote none (an inserted
    # copy), so the first instruction reading the value, as fieldmem.xla.hlo does for copies
    source_role: str | None = None


_SEQUENTIAL = ("while", "conditional", "call", "async-start")


_VIEWS = ("bitcast", "get-tuple-element", "copy", "copy-start", "copy-done", "tuple")


def _source(instruction: HloInstruction, by_name: dict[str, HloInstruction]) -> SourceLocation | None:
    return view_source(instruction, by_name, _VIEWS)


def _callers(computations: dict[str, HloComputation]) -> dict[str, tuple[str, HloInstruction]]:
    """Computation -> the instruction that runs it (a while, conditional or call), and where it is."""
    callers: dict[str, tuple[str, HloInstruction]] = {}
    for outer in computations.values():
        for instruction in outer.instructions:
            if instruction.opcode in _SEQUENTIAL:
                for callee in instruction.called:
                    callers.setdefault(callee, (outer.name, instruction))
    return callers


def _operand_source(instruction: HloInstruction, by_name: dict[str, HloInstruction]) -> SourceLocation | None:
    """The line of the first of a tuple's (or an asynchronous start's) operands that has one."""
    if instruction.opcode not in ("tuple", "async-start") and not instruction.opcode.endswith("-start"):
        return None
    for operand in instruction.operands:
        source = _source(by_name[operand], by_name) if operand in by_name else None
        if source is not None:
            return source
    return None


def _far_reader_source(name: str, users: dict[str, list[HloInstruction]], depth: int = 8) -> SourceLocation | None:
    """The line of the nearest instruction that reads ``name``, through readers that have none."""
    frontier, seen = [name], {name}
    for _ in range(depth):
        following: list[str] = []
        for value in frontier:
            for user in users.get(value, []):
                if user.source is not None:
                    return user.source
                if user.name not in seen:
                    seen.add(user.name)
                    following.append(user.name)
        frontier = following
    return None


def _fused_source(fusion: HloInstruction, computations: dict[str, HloComputation]) -> SourceLocation | None:
    """The line of the operation a fusion computes, when XLA kept no metadata on the fusion itself (its
    own ``transpose_copy_fusion``s, say): the fused root's, else the nearest fused operand's, walking
    back from the root breadth first, into fusions nested in it."""
    frontier = [(fusion.called[0], None)]
    seen: set[tuple[str, str | None]] = set()
    while frontier:
        name, start = frontier.pop(0)
        body = computations.get(name)
        if body is None or body.root is None or (name, start) in seen or len(seen) > 64:
            continue
        seen.add((name, start))
        inside = body.by_name()
        queue: list[HloInstruction | None] = [inside.get(start) if start else body.root]
        visited: set[str] = set()
        while queue:
            instruction = queue.pop(0)
            if instruction is None or instruction.name in visited:
                continue
            visited.add(instruction.name)
            if instruction.source is not None:
                return instruction.source
            if instruction.opcode == "fusion" and instruction.called:
                frontier.append((instruction.called[0], None))
            queue.extend(inside.get(operand) for operand in instruction.operands)
    return None


class _Holdings:
    """Which values each instruction's output holds, index by index (XLA dataflow, coarsely)."""

    def __init__(self, module: HloModule, defs: dict[tuple[str, str], dict[tuple[int, ...], set[int]]]):
        self.module = module
        self.defs = defs
        self.computations = {c.name: c for c in module.computations}
        self.by_name = {c.name: c.by_name() for c in module.computations}
        # callee -> [(caller computation, caller instruction)]
        self.callers: dict[str, list[tuple[str, HloInstruction]]] = {}
        for computation in module.computations:
            for instruction in computation.instructions:
                if instruction.opcode in _SEQUENTIAL:
                    for callee in instruction.called:
                        self.callers.setdefault(callee, []).append((computation.name, instruction))
        self.memo: dict[tuple[str, str], dict[tuple[int, ...], set[int]]] = {}

    def held(self, computation: str, name: str) -> dict[tuple[int, ...], set[int]]:
        key = (computation, name)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = {}  # cut cycles (loop state refers to itself)
        result = {index: set(ids) for index, ids in self.defs.get(key, {}).items()}
        instruction = self.by_name.get(computation, {}).get(name)
        if instruction is not None:
            for index, ids in self._forwarded(computation, instruction).items():
                if index not in result:
                    result[index] = set(ids)
        self.memo[key] = result
        return result

    def _forwarded(self, computation: str, instruction: HloInstruction) -> dict[tuple[int, ...], set[int]]:
        op = instruction.opcode
        operands = instruction.operands
        out: dict[tuple[int, ...], set[int]] = {}

        def merge(source: dict[tuple[int, ...], set[int]], prefix: tuple[int, ...] = ()) -> None:
            for index, ids in source.items():
                out.setdefault(prefix + index, set()).update(ids)

        if op in ("bitcast", "optimization-barrier") and operands:
            merge(self.held(computation, operands[0]))
        elif op.endswith(("-start", "-done", "-update")):
            self._forward_async(computation, instruction, merge)
        elif op == "get-tuple-element" and operands and instruction.tuple_index is not None:
            k = instruction.tuple_index
            for index, ids in self.held(computation, operands[0]).items():
                if index[:1] == (k,):
                    out.setdefault(index[1:], set()).update(ids)
        elif op == "tuple":
            for i, operand in enumerate(operands):
                merge(self.held(computation, operand), (i,))
        elif op == "while" and operands:
            merge(self.held(computation, operands[0]))
        elif op == "call" and instruction.called:
            callee = self.computations.get(instruction.called[0])
            if callee is not None and callee.root is not None:
                merge(self.held(callee.name, callee.root.name))
        elif op == "conditional":
            for callee_name in instruction.called:
                callee = self.computations.get(callee_name)
                if callee is not None and callee.root is not None:
                    merge(self.held(callee.name, callee.root.name))
        elif op == "parameter" and computation != self.module.entry.name:
            number = instruction.parameter_number or 0
            for caller_computation, caller in self.callers.get(computation, []):
                if caller.opcode == "while" and caller.operands:
                    merge(self.held(caller_computation, caller.operands[0]))
                elif caller.opcode == "conditional":
                    branch = list(caller.called).index(computation) if computation in caller.called else 0
                    if branch + 1 < len(caller.operands):
                        merge(self.held(caller_computation, caller.operands[branch + 1]))
                elif number < len(caller.operands):
                    merge(self.held(caller_computation, caller.operands[number]))
        return out

    def _forward_async(
        self,
        computation: str,
        instruction: HloInstruction,
        merge: Callable[[dict[tuple[int, ...], set[int]], tuple[int, ...]], None],
    ) -> None:
        """What an asynchronous op passes on, as XLA's dataflow has it: a ``copy-start``'s
        element 1 is its operand (element 0 the destination it defines), and its
        ``copy-done`` is that destination; any other ``X-start`` holds its operands in
        element 0 and its result in element 1, which its ``X-done`` returns (an
        ``all-reduce-start`` is its result, which ``all-reduce-done`` returns whole)."""
        op, operands = instruction.opcode, instruction.operands
        if not operands:
            return
        first = self.held(computation, operands[0])
        if op == "copy-start":
            merge(first, (1,))
        elif op in ("copy-done", "recv-done"):
            merge({index[1:]: ids for index, ids in first.items() if index[:1] == (0,)}, ())
        elif op in ("all-reduce-done", "send-done") or op.endswith("-update"):
            merge(first, ())
        elif op.endswith("-done"):
            merge({index[1:]: ids for index, ids in first.items() if index[:1] == (1,)}, ())
        elif op.endswith("-start") and op not in ("all-reduce-start", "send-start", "recv-start"):
            elements = tuple_elements(instruction.shape)
            if len(operands) == 1 and elements and not elements[0].startswith("("):
                merge(first, (0,))
            else:
                for i, operand in enumerate(operands):
                    merge(self.held(computation, operand), (0, i))

    def all_held(self, computation: str, name: str) -> set[int]:
        ids: set[int] = set()
        for values in self.held(computation, name).values():
            ids.update(values)
        return ids


def _value_infos(
    assignment: BufferAssignment, module: HloModule
) -> tuple[list[ValueInfo], dict[tuple[str, str], dict[tuple[int, ...], set[int]]]]:
    placement = assignment.placement()
    by_name = {c.name: c.by_name() for c in module.computations}
    computations = {c.name: c for c in module.computations}  # users() only where a reader is looked for
    # instruction name -> computation (names are unique in a module)
    home = {i.name: c.name for c in module.computations for i in c.instructions}
    callers = _callers(computations)
    infos: list[ValueInfo] = []
    defs: dict[tuple[str, str], dict[tuple[int, ...], set[int]]] = {}
    # the result of an op run asynchronously is defined at the root of the computation it wraps,
    # which the text does not print: it is element 1 of the op's start (``slice-start``)
    wrapped: dict[tuple[str | None, str | None], tuple[str, str]] = {
        (computation, root): (caller_computation, start)
        for computation, root, caller_computation, start in assignment.async_wrappers
        if computation not in by_name and start in by_name.get(caller_computation, {})
    }
    for logical in assignment.logical_buffers:
        buffer = logical
        if (logical.computation, logical.instruction) in wrapped:
            caller_computation, start = wrapped[(logical.computation, logical.instruction)]
            buffer = replace(
                logical, computation=caller_computation, instruction=start, shape_index=(1, *logical.shape_index)
            )
        computation = buffer.computation or (home.get(buffer.instruction) if buffer.instruction else None)
        instruction = (
            by_name.get(computation, {}).get(buffer.instruction) if computation and buffer.instruction else None
        )
        shape = sub_shape(instruction.shape, buffer.shape_index) if instruction else None
        source, role = None, None
        if instruction is not None and computation:
            source = _source(instruction, by_name[computation])
            role = "own" if source is not None else None
            if source is None and instruction.called and instruction.opcode == "fusion":
                source = _fused_source(instruction, computations)
                role = "fused" if source is not None else None
            if source is None and instruction.opcode != "parameter":
                source = reader_source(instruction.name, computations[computation].users())
                role = "user" if source is not None else None
            if source is None and instruction.opcode != "parameter":
                # a tuple's index table, an asynchronous op's: the line of what it holds, else of what
                # reads it, however far (XLA:TPU's slice-start -> slice-done -> custom-call -> fusion)
                source = _operand_source(instruction, by_name[computation]) or _far_reader_source(
                    instruction.name, computations[computation].users()
                )
                role = "near" if source is not None else None
            if source is None and instruction.opcode == "parameter" and computation != module.entry.name:
                # a loop's state or a branch's operand: the line of the loop or branch
                caller = callers.get(computation)
                source = _source(caller[1], by_name[caller[0]]) if caller is not None else None
                role = "caller" if source is not None else None
        placed = placement.get(buffer.id)
        if placed is None:
            slice_, kind = None, "unassigned"
        else:
            allocation, assigned = placed
            slice_, kind = Slice(allocation.index, assigned.offset, assigned.size), allocation.kind
        infos.append(
            ValueInfo(
                id=buffer.id,
                instruction=buffer.instruction,
                computation=computation,
                opcode=instruction.opcode if instruction else None,
                shape_index=buffer.shape_index,
                shape=shape,
                bytes=placed[1].size if placed else buffer.size,
                slice=slice_,
                kind=kind,
                source=source,
                source_role=role,
            )
        )
        if computation and buffer.instruction:
            defs.setdefault((computation, buffer.instruction), {}).setdefault(buffer.shape_index, set()).add(buffer.id)
    return infos, defs
