"""Chains: how one step's outputs become the next step's arguments, and the chain as one function.

The engine checks each step on the previous step's outputs, abstract (the
``ShapeDtypeStruct``s a compile gives, with their shardings: nothing is
allocated), spread by :func:`spread`; :func:`compose` is the fused chain.

A step may also take *extras*: arguments that do not come from the step
before (a per-step gradient, a batch), made by the chain's ``step_args``
factories. They follow the state: ``step(*state, *extra_args, **extra_kwargs)``.
They are not state: :func:`state_donation` donates the state arguments only,
and :func:`extra_names` names them so the hand-off checks can leave them out.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fieldmem.driver.prepare import has_array_leaves, positional_display_names, signature_of, user_jit_info
from fieldmem.request.spec import DonateSpec

__all__ = ["STEP_ARGS", "compose", "extra_names", "spread", "state_donation", "step_key"]

# the keyword argument of the fused chain that carries each step's extras: {"2:step": {"g": g}}
STEP_ARGS = "step_args"


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    info = user_jit_info(fn)
    return signature_of(getattr(fn, "_fun", fn) if info is not None else fn)


def _takes_one_positional(fn: Callable[..., Any], extras: int = 0) -> bool:
    """Whether ``fn`` takes exactly one positional argument besides ``extras`` positional extras
    (then a tuple is passed whole)."""
    signature = _signature(fn)
    if signature is None:
        return False
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) - extras == 1


def spread(outputs: Any, next_step: Callable[..., Any], extras: int = 0) -> tuple[Any, ...]:
    """How a chain passes a step's ``outputs`` to ``next_step``: the positional arguments of the state.

    A plain tuple is spread into positional arguments (``params, opt =
    step(params, opt)``), unless the next step takes exactly one positional
    argument (besides its ``extras`` positional extras, which follow the state);
    anything else (an array, a dataclass, a dict, a NamedTuple) is the one argument.
    """
    if type(outputs) is tuple and not (_takes_one_positional(next_step, extras) and len(outputs) != 1):
        return outputs
    return (outputs,)


def extra_names(fn: Callable[..., Any], state: int, extra_args: int, extra_kwargs: Sequence[str]) -> tuple[str, ...]:
    """The names of ``fn``'s extras when it is called with ``state`` positional state arguments, then
    ``extra_args`` positional extras and the keyword extras ``extra_kwargs``: how its leaves are named."""
    names = positional_display_names(_signature(fn), state + extra_args)
    return tuple(names[state:]) + tuple(extra_kwargs)


def state_donation(
    donate: DonateSpec,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    state: Sequence[int | str],
) -> DonateSpec:
    """The donation of a step that takes extras: ``donate`` where it names arguments or is a jit's own
    (``auto`` on a jit object) or ``none``; otherwise (``all``, ``auto`` on a plain function) the
    ``state`` arguments (positions and keyword names) that hold arrays, never the extras."""
    if donate.mode in ("none", "list") or (donate.mode == "auto" and user_jit_info(fn) is not None):
        return donate
    items = tuple(slot for slot in state if has_array_leaves(args[slot] if isinstance(slot, int) else kwargs[slot]))
    return DonateSpec("list", items) if items else DonateSpec("none")


def step_key(index: int, name: str) -> str:
    """The key of step ``index`` (0-based) in the fused chain's ``step_args``: ``"2:update"``."""
    return f"{index + 1}:{name}"


def compose(
    steps: Sequence[Callable[..., Any]],
    name: str = "chain",
    extras: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]] | None] | None = None,
) -> Callable[..., Any]:
    """The chain as one function: ``steps[-1](...steps[1](*steps[0](*args, **kwargs)))``, spread as
    :func:`spread` does. jit it to get the fused chain (a step that is a jit object is inlined).

    ``extras[i]``, when given, is step ``i``'s ``(key, positional names, keyword names)``: the
    composed function then takes a keyword argument ``step_args`` mapping each key to a dict of
    those names and their values, passed to the step after its state (so they are arguments of
    the fused program, not constants baked into it).
    """
    plan = list(extras) if extras is not None else [None] * len(steps)

    def composed(*args: Any, **kwargs: Any) -> Any:
        given = kwargs.pop(STEP_ARGS, None) or {}

        def extra(index: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
            spec = plan[index]
            if spec is None:
                return (), {}
            key, positional, keywords = spec
            return tuple(given[key][n] for n in positional), {k: given[key][k] for k in keywords}

        extra_args, extra_kwargs = extra(0)
        value = steps[0](*args, *extra_args, **kwargs, **extra_kwargs)
        for index, step in enumerate(steps[1:], start=1):
            extra_args, extra_kwargs = extra(index)
            value = step(*spread(value, step, len(extra_args)), *extra_args, **extra_kwargs)
        return value

    first = getattr(steps[0], "_fun", steps[0])
    try:
        signature = inspect.signature(first)
        if any(spec is not None for spec in plan):
            params = list(signature.parameters.values())
            cut = next((n for n, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
            extra = inspect.Parameter(STEP_ARGS, inspect.Parameter.KEYWORD_ONLY)
            signature = signature.replace(parameters=[*params[:cut], extra, *params[cut:]])
        composed.__signature__ = signature  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    composed.__name__ = composed.__qualname__ = name
    return composed
