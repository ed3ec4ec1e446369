"""Helpers for the integration tests that compile real functions.

They build :class:`fieldmem.request.target.Target`s straight from a function and an
args factory (no module to import), run the checker on them, and check what
a report claims against jax itself: an independent compile's
``memory_analysis()`` and, at run time, the buffer pointers of donated inputs
and the outputs said to reuse them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any

import jax
import jax.numpy as jnp

from fieldmem.driver import MEMORY_FIELDS, PreparedCall, start_variants
from fieldmem.model.readings import CompiledVariant
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import Target

UNUSABLE_WARNING = "Some donated buffers were not usable"


def make_target(
    fn: Callable[..., Any],
    factory: Callable[[], Any],
    *,
    donate: Any = None,
    static: Any = None,
    name: str = "test:fn",
    expect: str = "any",
    definition: str | None = None,
) -> Target:
    """A target for ``fn`` whose example arguments come from ``factory``."""
    return Target(
        spec=name,
        name=name,
        function=fn,
        args_factory=factory,
        args_origin=None,
        shapes=None,
        donate=DonateSpec.parse(donate, "donate=") if donate is not None else DonateSpec(),
        static=StaticSpec.parse(static, "static=") if static is not None else StaticSpec(),
        expect=expect,
        max_peak=None,
        definition=definition,
    )


def compiled_variants(call: PreparedCall, pool: Executor | None = None) -> tuple[CompiledVariant, CompiledVariant]:
    """The plain and the donated variant of ``call``, compiled as the checker compiles them (in ``pool``, or here)."""
    plain, donated = start_variants(call, pool).result()
    return plain.variant, donated.variant


def check_reports(targets: Iterable[Target], min_bytes: int = 1024) -> Report:
    return check_targets(list(targets), CheckOptions(min_bytes=min_bytes))


def check_one(target: Target, min_bytes: int = 1024) -> TargetResult:
    """The checked result of one target, which must have compiled."""
    result = check_reports([target], min_bytes).results[0]
    assert result.status == "ok", result.error
    return result


def materialize(tree: Any) -> Any:
    """Concrete zeros for every ``ShapeDtypeStruct`` leaf; other leaves as they are."""
    return jax.tree_util.tree_map(
        lambda leaf: jnp.zeros(leaf.shape, leaf.dtype) if isinstance(leaf, jax.ShapeDtypeStruct) else leaf,
        tree,
    )


def report_leaves(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: list[str],
    static: Iterable[int | str] = (),
) -> list[tuple[str, Any]]:
    """(path, leaf) in the report's numbering: positional leaves, then kwargs in the order given."""
    static = set(static)
    slots = [(names[i], value) for i, value in enumerate(args) if i not in static]
    slots += [(key, value) for key, value in kwargs.items() if key not in static]
    leaves = []
    for display, value in slots:
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            leaves.append((display + jax.tree_util.keystr(path), leaf))
    return leaves


def output_leaves(out: Any) -> list[tuple[str, Any]]:
    return [("out" + jax.tree_util.keystr(p), leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(out)[0]]


# the figure a static check leaves unavailable: it compiles at -O0 (fieldmem.driver.FAST_COMPILE_UNAVAILABLE)
CODE_SIZE = "generated_code_bytes"


def xla_memory(compiled: Any, *, code: bool = False) -> dict[str, int]:
    """``memory_analysis()`` under the report's names (the figures the report copies verbatim).

    A static check compiles with XLA:CPU's code generation at -O0, so its code size is not
    the one a default compile gives: left out unless ``code`` (a report of ``--run``, or of
    ``fast_compile=False``).
    """
    analysis = compiled.memory_analysis()
    return {
        name: int(getattr(analysis, attribute))
        for name, attribute in MEMORY_FIELDS.items()
        if code or name != CODE_SIZE
    }


def constant_bytes(compiled: Any) -> int:
    """Bytes of the constant allocations of XLA's buffer assignment (arrays and scalars compiled into
    the program), which the footprint counts besides XLA's argument, output and temp figures."""
    from fieldmem.xla import buffers

    assignment = buffers.decode_buffer_assignment(compiled.memory_analysis().serialized_buffer_assignment_proto)
    return sum(a.size for a in assignment.allocations if a.is_constant)


def compile_quietly(jitted: Any, *args: Any, **kwargs: Any) -> Any:
    """``jitted.lower(...).compile()``, with jax's unusable-donation warning silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        return jitted.lower(*args, **kwargs).compile()


def run_and_check_aliases(
    compiled: Any,
    result: TargetResult,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: list[str],
    static: Iterable[int | str] = (),
) -> Any:
    """Run ``compiled`` on ``args`` and check every alias of the donated variant at run time.

    For each claimed alias the output leaf's buffer pointer must equal the
    input leaf's pointer taken before the call, and the input must be
    deleted afterwards (it was donated). Returns the outputs.
    """
    static = set(static)
    inputs = report_leaves(args, kwargs, names, static)
    assert [path for path, _ in inputs] == [i.path for i in result.inputs]
    pointers = {n: leaf.unsafe_buffer_pointer() for n, (_, leaf) in enumerate(inputs)}
    dynamic_args = [a for i, a in enumerate(args) if i not in static]
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        out = compiled(*dynamic_args, **dynamic_kwargs)
    outputs = output_leaves(out)
    assert [path for path, _ in outputs] == [o.path for o in result.outputs]
    aliases = result.variants["donated"].aliases
    assert aliases, "nothing to check at run time"
    for alias in aliases:
        in_path, in_leaf = inputs[alias.input_index]
        out_path, out_leaf = outputs[alias.output_index]
        assert (in_path, out_path) == (alias.input, alias.output)
        assert out_leaf.unsafe_buffer_pointer() == pointers[alias.input_index], alias
        assert in_leaf.is_deleted(), alias
    return out
