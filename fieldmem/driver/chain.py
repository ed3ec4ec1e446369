"""Chains: how one step's outputs become the next step's arguments, and the chain as one function.

The engine checks each step on the previous step's outputs, abstract (the
``ShapeDtypeStruct``s a compile gives, with their shardings: nothing is
allocated), spread by :func:`spread`; :func:`compose` is the fused chain.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from fieldmem.driver.prepare import signature_of, user_jit_info

__all__ = ["compose", "spread"]


def _takes_one_positional(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes exactly one positional argument (then a tuple is passed whole)."""
    info = user_jit_info(fn)
    signature = signature_of(getattr(fn, "_fun", fn) if info is not None else fn)
    if signature is None:
        return False
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1


def spread(outputs: Any, next_step: Callable[..., Any]) -> tuple[Any, ...]:
    """How a chain passes a step's ``outputs`` to ``next_step``: the positional arguments.

    A plain tuple is spread into positional arguments (``params, opt =
    step(params, opt)``), unless the next step takes exactly one positional
    argument; anything else (an array, a dataclass, a dict, a NamedTuple) is
    the one argument.
    """
    if type(outputs) is tuple and not (_takes_one_positional(next_step) and len(outputs) != 1):
        return outputs
    return (outputs,)


def compose(steps: Sequence[Callable[..., Any]], name: str = "chain") -> Callable[..., Any]:
    """The chain as one function: ``steps[-1](...steps[1](*steps[0](*args, **kwargs)))``, spread as
    :func:`spread` does. jit it to get the fused chain (a step that is a jit object is inlined)."""

    def composed(*args: Any, **kwargs: Any) -> Any:
        value = steps[0](*args, **kwargs)
        for step in steps[1:]:
            value = step(*spread(value, step))
        return value

    first = getattr(steps[0], "_fun", steps[0])
    try:
        composed.__signature__ = inspect.signature(first)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    composed.__name__ = composed.__qualname__ = name
    return composed
