"""A compiled program's argument and output leaves, numbered as the report numbers them (plain data).

Each leaf's path in the user's terms, shape, dtype and size, the HLO
parameter it is, whether jax donated it, its sharding, layout and memory
kind as compiled, where the call's array is against where the program takes
it, and the piece each device holds of a leaf split over devices. Read for
:func:`fieldmem.driver.variant.read_variant`; nothing is lowered, compiled or
run here; jax is imported on first use.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fieldmem.driver.paths import path_string
from fieldmem.driver.prepare import PreparedCall
from fieldmem.driver.shapes import dtype_name, shape_bytes
from fieldmem.model.errors import CompileError
from fieldmem.model.readings import InputLeaf, OutputLeaf

__all__ = [
    "compiled_formats",
    "compiled_outputs",
    "describe_sharding",
    "flat_order",
    "input_leaves",
    "input_placements",
    "memory_kinds",
    "out_tree",
    "with_device_shapes",
]


def describe_sharding(sharding: Any) -> str | None:
    """A sharding in words that compare equal exactly when the placement is the same.

    ``NamedSharding``: its partition spec (trailing unsharded dimensions
    dropped, so ``P('x')`` equals ``P('x', None)``) over the mesh's axis sizes;
    a single device: ``platform:id``; anything else: its repr.
    """
    if sharding is None:
        return None
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        parts = list(spec)
        while parts and parts[-1] is None:
            parts.pop()
        axes = ", ".join(f"{name}={size}" for name, size in dict(getattr(mesh, "shape", {})).items())
        memory = getattr(sharding, "memory_kind", None)
        where = f" in {memory}" if memory not in (None, "device") else ""
        return f"P({', '.join(repr(p) for p in parts)}) over mesh({axes}){where}"
    devices = getattr(sharding, "device_set", None)
    if devices is not None and len(devices) == 1 and type(sharding).__name__ == "SingleDeviceSharding":
        device = next(iter(devices))
        memory = getattr(sharding, "memory_kind", None)
        return f"{device.platform}:{device.id}" + (f" in {memory}" if memory not in (None, "device") else "")
    return repr(sharding)


def _describe_layout(layout: Any) -> str | None:
    order = getattr(layout, "major_to_minor", None)
    if order is None:
        return None
    tiling = getattr(layout, "tiling", ()) or ()
    text = "major-to-minor (" + ",".join(str(d) for d in order) + ")"
    return text + (f" tiled {tiling}" if tiling else "")


def _formats(tree: Any) -> list[tuple[str | None, str | None]] | None:
    """(sharding, layout) descriptions of a compiled program's ``input_formats``/``output_formats`` leaves.

    Read in one place and tolerated when missing (older jax has
    ``input_layouts`` or only shardings): None when unreadable.
    """
    import jax

    if tree is None:
        return None
    try:
        leaves = jax.tree_util.tree_leaves(
            tree, is_leaf=lambda x: (hasattr(x, "layout") and hasattr(x, "sharding")) or hasattr(x, "device_set")
        )
    except Exception:
        return None
    # thousands of leaves share a few shardings and layouts (equal objects, often the same one): each is
    # described once; their words depend on nothing that equality leaves out
    said: dict[tuple[type, Any], str | None] = {}

    def once(thing: Any, describe: Callable[[Any], str | None]) -> str | None:
        try:
            key = (type(thing), thing)
            if key not in said:
                said[key] = describe(thing)
            return said[key]
        except TypeError:  # not hashable
            return describe(thing)

    result: list[tuple[str | None, str | None]] = []
    for leaf in leaves:
        if hasattr(leaf, "layout") and hasattr(leaf, "sharding"):
            result.append((once(leaf.sharding, describe_sharding), once(leaf.layout, _describe_layout)))
        else:
            result.append((once(leaf, describe_sharding), None))
    return result


def compiled_formats(compiled: Any, which: str) -> list[tuple[str | None, str | None]] | None:
    for attribute in (f"{which}_formats", f"{which}_shardings"):
        try:
            value = getattr(compiled, attribute)
        except Exception:
            continue
        found = _formats(value)
        if found is not None:
            return found
    return None


def input_placements(compiled: Any) -> list[Any] | None:
    """The compiled program's input shardings, flat in jax's order, to say where it takes each argument
    leaf; None for a deviceless compile (its arguments exist only as placed for it) or where jax does not say."""
    from fieldmem.driver.dumps import compile_notes
    from fieldmem.driver.placement import flat_shardings

    notes = compile_notes(compiled)
    if notes is not None and notes.target is not None:
        return None
    return flat_shardings(compiled, "input")


def input_leaves(
    call: PreparedCall,
    args_info: Any,
    kept: set[int] | None,
    formats: list[tuple[str | None, str | None]] | None = None,
    shardings: list[Any] | None = None,
    kinds: list[str | None] | None = None,
) -> tuple[InputLeaf, ...]:
    """Number the array leaves as the report does and map them to HLO parameters.

    Report order: positional arguments, then keyword arguments in the order
    given. jax's order: dynamic positional arguments, then dynamic keyword
    arguments sorted by name. ``args_info`` (jax's order) tells which leaf is
    donated; ``kept`` (jax's order) which ones the HLO still has; ``shardings``
    (jax's order) where the program takes each, against where the call's
    argument is (:func:`fieldmem.driver.placement.placement`); ``kinds`` (jax's
    order) the memory each is taken in, where not the device's: read for a
    deviceless compile too, which has no ``shardings`` to place against.
    """
    import jax

    from fieldmem.driver.placement import placement

    tree = jax.tree_util
    info_leaves = tree.tree_leaves(args_info, is_leaf=lambda x: hasattr(x, "donated") and hasattr(x, "_aval"))
    flat = _flat_arguments(call)
    if len(info_leaves) != flat.count:
        raise CompileError(
            f"fieldmem could not match the {flat.count} argument leaves it sees to the "
            f"{len(info_leaves)} jax lowered (jax {jax.__version__}); please report this"
        )
    if formats is not None and len(formats) != flat.count:
        formats = None  # jax grouped them another way: leave shardings and layouts unknown
    values = _jax_order_values(call) if shardings is not None and len(shardings) == flat.count else None
    if kinds is not None and len(kinds) != flat.count:
        kinds = None
    kept_sorted = sorted(kept) if kept is not None else list(range(flat.count))
    hlo_number = {jax_index: number for number, jax_index in enumerate(kept_sorted)}

    result: list[InputLeaf] = []
    for jax_index, argument, leaf_path, abstract in flat.leaves:
        info = info_leaves[jax_index]
        aval = getattr(info, "_aval", None)
        shape = tuple(getattr(aval, "shape", ()) or ())
        result.append(
            InputLeaf(
                index=len(result),
                path=leaf_path,
                argument=argument,
                shape=shape,
                dtype=dtype_name(aval.dtype) if aval is not None else "unknown",
                bytes=shape_bytes(shape, aval.dtype) if aval is not None else 0,
                donated=bool(getattr(info, "donated", False)),
                hlo_parameter=hlo_number.get(jax_index),
                abstract=abstract,
                sharding=formats[jax_index][0] if formats else None,
                layout=formats[jax_index][1] if formats else None,
                memory_kind=kinds[jax_index] if kinds is not None else None,
                placement=(
                    placement(values[jax_index], shardings[jax_index], shape, aval.dtype, describe_sharding)
                    if values is not None and shardings and aval is not None
                    else None
                ),
                same_buffer_as=flat.same_buffer_as[len(result)],
            )
        )
    return tuple(result)


def _jax_order_values(call: PreparedCall) -> list[Any]:
    """The call's dynamic argument leaves, in jax's order (positional, then keywords sorted by name); not
    kept with the flattened call (:func:`_flat_arguments`), which would keep the user's arrays alive."""
    import jax

    dyn_positional = [call.args[i] for i in range(len(call.args)) if i not in call.static_positions]
    dyn_keywords = [call.kwargs[k] for k in sorted(call.kwargs) if k not in call.static_names]
    return [leaf for value in (*dyn_positional, *dyn_keywords) for leaf in jax.tree_util.tree_leaves(value)]


@dataclass(frozen=True)
class _FlatArguments:
    """A call's array leaves, flattened once for both variants: ``count`` leaves, and in report order
    each leaf's (position in jax's order, argument, path, whether it is a ShapeDtypeStruct), and the report
    index of the first leaf that is the same buffer (one array given twice; None: a buffer of its own)."""

    count: int
    leaves: tuple[tuple[int, str, str, bool], ...]
    same_buffer_as: tuple[int | None, ...]


_flat_cache: tuple[weakref.ref[PreparedCall], _FlatArguments] | None = None  # the last call's: both variants read it


def _flat_arguments(call: PreparedCall) -> _FlatArguments:
    """The leaves of ``call``'s dynamic arguments, numbered as the report numbers them.

    Report order: positional arguments, then keyword arguments in the order
    given. jax's order: dynamic positional arguments, then dynamic keyword
    arguments sorted by name. The two variants of a check read the same call:
    its pytrees are flattened (and their paths written) once.
    """
    global _flat_cache
    cached = _flat_cache
    if cached is not None and cached[0]() is call:
        return cached[1]
    import jax

    from fieldmem.driver.placement import buffer_identity, stood_for

    tree = jax.tree_util
    names = call.positional_names
    dyn_positional = [i for i in range(len(call.args)) if i not in call.static_positions]
    dyn_keywords = [k for k in call.kwargs if k not in call.static_names]
    slots: list[tuple[Any, str]] = [(i, names[i]) for i in dyn_positional] + [(k, k) for k in dyn_keywords]
    flattened = {
        slot: [(path_string(path), leaf) for path, leaf in tree.tree_flatten_with_path(_value(call, slot))[0]]
        for slot, _ in slots
    }
    jax_slots = [*dyn_positional, *sorted(dyn_keywords)]
    position_in_jax: dict[tuple[Any, str], int] = {}
    count = 0
    for slot in jax_slots:
        for where, _ in flattened[slot]:
            position_in_jax[(slot, where)] = count
            count += 1
    user_names = call.leaf_names.inputs if call.leaf_names is not None else {}
    leaves: list[tuple[int, str, str, bool]] = []
    first_of: dict[tuple[Any, ...], int] = {}  # a buffer of the call's -> the first leaf that is it
    same_buffer_as: list[int | None] = []
    for slot, display in slots:
        for where, leaf in flattened[slot]:
            argument, leaf_path = user_names.get((slot, where), (display, display + where))
            # abstract: a shape the user gave; not one standing for an array (a traced factory's, the plugin's)
            abstract = isinstance(leaf, jax.ShapeDtypeStruct) and stood_for(leaf) is None
            buffer = buffer_identity(leaf)  # None for a shape the user gave: never one buffer
            first = first_of.setdefault(buffer, len(leaves)) if buffer is not None else None
            same_buffer_as.append(first if first != len(leaves) else None)
            leaves.append((position_in_jax[(slot, where)], argument, leaf_path, abstract))
    flat = _FlatArguments(count, tuple(leaves), tuple(same_buffer_as))
    _flat_cache = (weakref.ref(call), flat)
    return flat


def flat_order(call: PreparedCall) -> list[int]:
    """For each dynamic argument leaf of ``call`` in report order, its position in jax's order."""
    return [jax_index for jax_index, _, _, _ in _flat_arguments(call).leaves]


def _value(call: PreparedCall, slot: int | str) -> Any:
    return call.args[slot] if isinstance(slot, int) else call.kwargs[slot]


def compiled_outputs(
    lowered: Any,
    compiled: Any,
    call: PreparedCall,
    structs: bool = True,
    like: tuple[tuple[OutputLeaf, ...], Any] | None = None,
) -> tuple[tuple[OutputLeaf, ...], Any]:
    """The output leaves (named in the user's terms for a wrapper's program), and with ``structs`` a function
    that builds the outputs as a pytree of ``ShapeDtypeStruct`` with the compiled shardings (else None): a
    chain's next step asks for them, a single target never does (one struct per leaf: not built for nothing).

    ``like``: the leaves read from the other variant of the same trace, and its ``out_tree``. Donation
    changes no output's path, shape or dtype, so where the tree is the same and so are the compiled
    formats, those leaves are this program's (every leaf is not read again after the donated compile).
    """
    import jax

    formats = compiled_formats(compiled, "output")
    tree = out_tree(lowered)
    if (
        like is not None
        and tree is not None
        and like[1] is not None
        and tree == like[1]
        and formats is not None
        and formats == [(o.sharding, o.layout) for o in like[0]]
    ):
        outputs = like[0]
    else:
        outputs = _output_leaves(lowered, call, formats, memory_kinds(compiled))
    if not structs:
        return outputs, None
    leaf_names = call.leaf_names

    def returned() -> Any:
        flat, treedef = jax.tree_util.tree_flatten(lowered.out_info)
        try:
            shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
        except Exception:
            shardings = []
        if len(shardings) != len(flat):
            shardings = [None] * len(flat)
        structs = jax.tree_util.tree_unflatten(
            treedef,
            [
                jax.ShapeDtypeStruct(out.shape, leaf.dtype, sharding=shardings[n])
                for n, (out, leaf) in enumerate(zip(outputs, flat))
            ],
        )
        if leaf_names is not None and leaf_names.returned is not None:
            structs = leaf_names.returned(structs)  # what a wrapper hands back to its caller
        return structs

    return outputs, returned


def memory_kinds(compiled: Any, which: str = "output") -> list[str | None] | None:
    """The memory kind of each output (or input) of ``compiled``, flat, where not the device's own
    (None where jax does not say)."""
    from fieldmem.driver.placement import flat_shardings, other_memory

    shardings = flat_shardings(compiled, which)
    return [other_memory(s) for s in shardings] if shardings is not None else None


def _output_leaves(
    lowered: Any,
    call: PreparedCall,
    formats: list[tuple[str | None, str | None]] | None,
    kinds: list[str | None] | None = None,
) -> tuple[OutputLeaf, ...]:
    """The output leaves of ``lowered``, read from its ``out_info``, with the compiled ``formats`` and
    memory ``kinds``."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(lowered.out_info)
    names = None
    if call.leaf_names is not None and call.leaf_names.outputs is not None:
        names = call.leaf_names.outputs(lowered.out_info)
    if names is None or len(names) != len(flat):
        names = ["out" + path_string(path) for path, _ in flat]
    if formats is not None and len(formats) != len(flat):
        formats = None
    if kinds is not None and len(kinds) != len(flat):
        kinds = None
    outputs = []
    for n, (_, leaf) in enumerate(flat):
        shape = tuple(getattr(leaf, "shape", ()) or ())
        outputs.append(
            OutputLeaf(
                index=n,
                path=names[n],
                shape=shape,
                dtype=dtype_name(leaf.dtype),
                bytes=shape_bytes(shape, leaf.dtype),
                sharding=formats[n][0] if formats else None,
                layout=formats[n][1] if formats else None,
                memory_kind=kinds[n] if kinds else None,
            )
        )
    return tuple(outputs)


def out_tree(lowered: Any) -> Any:
    """The tree of a lowered program's outputs (None where jax does not say)."""
    try:
        return lowered.out_tree
    except Exception:
        return None


def with_device_shapes(
    call: PreparedCall, compiled: Any, inputs: tuple[InputLeaf, ...], outputs: tuple[OutputLeaf, ...]
) -> tuple[tuple[InputLeaf, ...], tuple[OutputLeaf, ...]]:
    """``inputs`` and ``outputs`` with the shape of the piece each device holds of every leaf the compiled
    program splits over devices (a pmap's mapped axis: ``(4, 256)`` is ``(1, 256)`` on each of 4 devices);
    the same tuples where no leaf is split (one device) or jax does not say."""
    taken = _compiled_shardings(compiled, "input")
    given = _compiled_shardings(compiled, "output")
    if not any(len(getattr(s, "device_set", ())) > 1 for s in (*(taken or ()), *(given or ()))):
        return inputs, outputs  # one device: every leaf whole
    flat = _flat_arguments(call)
    if taken is not None and len(taken) == flat.count == len(inputs):
        # the report numbers inputs in its order; the shardings are in jax's
        inputs = _same_or(
            inputs, tuple(_piece(leaf, taken[at]) for leaf, (at, *_) in zip(inputs, flat.leaves, strict=True))
        )
    if given is not None and len(given) == len(outputs):
        outputs = _same_or(outputs, tuple(_piece(leaf, s) for leaf, s in zip(outputs, given, strict=True)))
    return inputs, outputs


def _same_or(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    """``old`` where ``new`` holds the same leaves (the donated variant shares the plain one's outputs)."""
    return old if all(a is b for a, b in zip(old, new, strict=True)) else new


def _compiled_shardings(compiled: Any, which: str) -> list[Any] | None:
    """The sharding objects of ``compiled``'s ``input_shardings``/``output_shardings``, flat (None: unreadable)."""
    import jax

    try:
        tree = getattr(compiled, f"{which}_shardings")
        return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "shard_shape"))
    except Exception:
        return None


_Leaf = TypeVar("_Leaf", InputLeaf, OutputLeaf)


def _piece(leaf: _Leaf, sharding: Any) -> _Leaf:
    """``leaf`` with ``device_shape`` where ``sharding`` splits it over devices."""
    try:
        piece = tuple(int(d) for d in sharding.shard_shape(leaf.shape))
    except Exception:
        return leaf
    return dataclasses.replace(leaf, device_shape=piece) if piece != leaf.shape else leaf
