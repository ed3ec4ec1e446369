"""Is a parsed module a well-formed program? What the queries rely on, checked once after parsing.

The queries walk operands and the calls between computations; text that
parses line by line can still describe no program XLA would print: an
operand naming no instruction of its computation, an instruction that reads
itself (directly or around a cycle), a ``while`` whose body calls the
computation holding it, or computations nested deeper than any real module.
Walking such a module recursed without end. :func:`check_structure` refuses
each with :class:`HloStructureError` (an :class:`~.text.HloParseError`, so
every caller that handles unreadable HLO handles these). Pure text records,
no jax; iterative, linear in the size of the module.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import HloComputation
from .text import HloParseError

__all__ = ["MAX_NESTING", "HloStructureError", "check_structure"]

# Computations calling computations (loops in loops, fusions, branches): real modules nest a few
# levels, tens at most. The walks over the call graph recurse once per level.
MAX_NESTING = 200


class HloStructureError(HloParseError):
    """The text parses, but is not a program: an unknown operand, a cycle, or nesting past :data:`MAX_NESTING`."""


def _short(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:80] + "…")


def check_structure(computations: Sequence[HloComputation]) -> None:
    """Check every operand names an instruction of its computation, that no value depends on itself,
    and that the calls between computations form no cycle and nest at most :data:`MAX_NESTING` deep.

    Raises:
        HloStructureError: the first problem found, naming the computation and instruction.
    """
    for computation in computations:
        _check_operands(computation)
    _check_calls(computations)


def _check_operands(computation: HloComputation) -> None:
    by_name = {i.name: i for i in computation.instructions}
    if len(by_name) != len(computation.instructions):
        seen: set[str] = set()
        for instruction in computation.instructions:
            if instruction.name in seen:
                raise HloStructureError(
                    f"computation {_short(computation.name)} defines {_short(instruction.name)} twice"
                )
            seen.add(instruction.name)
    for instruction in computation.instructions:
        for operand in instruction.operands:
            if operand not in by_name:
                raise HloStructureError(
                    f"instruction {_short(instruction.name)} of computation {_short(computation.name)} reads "
                    f"{_short(operand)}, which no instruction of the computation defines"
                )
    # a value that depends on itself: depth-first, without recursion (0 new, 1 on the path, 2 done)
    state: dict[str, int] = {}
    for start in by_name:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            name, next_operand = stack[-1]
            operands = by_name[name].operands
            if next_operand == len(operands):
                state[name] = 2
                stack.pop()
                continue
            stack[-1] = (name, next_operand + 1)
            operand = operands[next_operand]
            mark = state.get(operand, 0)
            if mark == 1:
                raise HloStructureError(
                    f"instruction {_short(operand)} of computation {_short(computation.name)} depends on itself"
                    + (f" (through {_short(name)})" if name != operand else "")
                )
            if mark == 0:
                state[operand] = 1
                stack.append((operand, 0))


def _check_calls(computations: Sequence[HloComputation]) -> None:
    calls = {c.name: tuple(callee for i in c.instructions for callee in i.called) for c in computations}
    calls = {name: tuple(callee for callee in callees if callee in calls) for name, callees in calls.items()}
    state: dict[str, int] = {}
    height: dict[str, int] = {}  # the longest chain of calls from a computation down, itself included
    for start in calls:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            name, next_callee = stack[-1]
            callees = calls[name]
            if next_callee == len(callees):
                state[name] = 2
                height[name] = 1 + max((height[c] for c in callees), default=0)
                if height[name] > MAX_NESTING:
                    raise HloStructureError(
                        f"computations call each other more than {MAX_NESTING} levels deep "
                        f"(from {_short(name)}): no module XLA prints nests so deep"
                    )
                stack.pop()
                continue
            stack[-1] = (name, next_callee + 1)
            callee = callees[next_callee]
            mark = state.get(callee, 0)
            if mark == 1:
                raise HloStructureError(
                    f"computation {_short(callee)} calls itself"
                    + (f" (through {_short(name)})" if name != callee else "")
                    + ": a loop body, branch or fusion cannot contain its own caller"
                )
            if mark == 0:
                state[callee] = 1
                stack.append((callee, 0))
