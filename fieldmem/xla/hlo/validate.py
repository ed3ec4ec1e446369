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

from collections.abc import Callable, Collection, Mapping, Sequence

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


def check_structure(computations: Sequence[HloComputation], checked: Collection[int] = ()) -> None:
    """Check every operand names an instruction of its computation, that no value depends on itself,
    and that the calls between computations form no cycle and nest at most :data:`MAX_NESTING` deep.

    ``checked``: the ``id()`` of computations whose operands were already checked (a computation is
    immutable); the calls between computations are checked all the same.

    Raises:
        HloStructureError: the first problem found, naming the computation and instruction.
    """
    for computation in computations:
        if id(computation) not in checked:
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

    def depends_on_itself(name: str, operand: str) -> HloStructureError:
        return HloStructureError(
            f"instruction {_short(operand)} of computation {_short(computation.name)} depends on itself"
            + (f" (through {_short(name)})" if name != operand else "")
        )

    _depth_first({name: instruction.operands for name, instruction in by_name.items()}, depends_on_itself)


def _check_calls(computations: Sequence[HloComputation]) -> None:
    calls = {c.name: tuple(callee for i in c.instructions for callee in i.called) for c in computations}
    calls = {name: tuple(callee for callee in callees if callee in calls) for name, callees in calls.items()}
    height: dict[str, int] = {}  # the longest chain of calls from a computation down, itself included

    def calls_itself(name: str, callee: str) -> HloStructureError:
        return HloStructureError(
            f"computation {_short(callee)} calls itself"
            + (f" (through {_short(name)})" if name != callee else "")
            + ": a loop body, branch or fusion cannot contain its own caller"
        )

    def measure(name: str) -> None:
        height[name] = 1 + max((height[c] for c in calls[name]), default=0)
        if height[name] > MAX_NESTING:
            raise HloStructureError(
                f"computations call each other more than {MAX_NESTING} levels deep "
                f"(from {_short(name)}): no module XLA prints nests so deep"
            )

    _depth_first(calls, calls_itself, measure)


def _depth_first(
    edges: Mapping[str, Sequence[str]],
    cycle: Callable[[str, str], HloStructureError],
    done: Callable[[str], None] | None = None,
) -> None:
    """Walk the graph ``edges`` (node -> the nodes it reaches) depth-first, without recursion.

    Raises ``cycle(node, target)`` for the first edge that closes a cycle; calls ``done(node)`` once every
    node it reaches is done (children before parents).
    """
    state: dict[str, int] = {}  # 0 new, 1 on the path, 2 done
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            name, following = stack[-1]
            targets = edges[name]
            if following == len(targets):
                state[name] = 2
                if done is not None:
                    done(name)
                stack.pop()
                continue
            stack[-1] = (name, following + 1)
            target = targets[following]
            mark = state.get(target, 0)
            if mark == 1:
                raise cycle(name, target)
            if mark == 0:
                state[target] = 1
                stack.append((target, 0))
