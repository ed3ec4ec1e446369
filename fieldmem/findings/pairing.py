"""Which input an output is the next value of: outputs declared new (``--new``), the inputs of the
same path, and the donor whose buffer an output could have reused (:func:`state_donor`).

Shared by the verdict (:mod:`fieldmem.findings.analysis`) and the advisor. It never imports jax
and never prints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fieldmem.findings.program import ProgramLeaves
from fieldmem.model.copies import Alias
from fieldmem.model.readings import InputLeaf, OutputLeaf

__all__ = ["declared_new", "pairing_key", "same_path_inputs", "state_donor"]


def declared_new(path: str, patterns: Sequence[str]) -> bool:
    """Whether the output ``path`` is one the user declared new (``--new``, ``new=``).

    A pattern names an output path (``out.logits``, ``out[1]``) and everything
    under it (``out.aux`` covers ``out.aux['loss']``); ``*`` matches any run of
    characters (``out.*logits``). Patterns are checked by
    :func:`fieldmem.request.options.parse_new`.
    """
    for pattern in patterns:
        if "*" in pattern:
            if re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), path):
                return True
        elif path == pattern or (path.startswith(pattern) and path[len(pattern)] in ".["):
            return True
    return False


_OUTPUT_ITEM = re.compile(r"out\[(\d+)\](.*)", re.S)


def same_path_inputs(output_path: str, inputs: Sequence[InputLeaf]) -> frozenset[str]:
    """The input paths that mirror ``output_path``, as update functions return their state: item ``i`` of a
    tuple output is the ``i``-th argument (``out[1][0].mu['w']`` ↔ ``opt_state[0].mu['w']``: ``params,
    opt_state = step(params, opt_state, batch)``); any other output mirrors each argument (``out['w']`` ↔
    ``params['w']``). Arguments are counted in the call's order, static ones left out."""
    if not output_path.startswith("out"):  # a wrapper's output named by the user's leaf (nnx: model.l1.kernel)
        return frozenset({output_path})
    arguments = list(dict.fromkeys(leaf.argument for leaf in inputs))
    item = _OUTPUT_ITEM.fullmatch(output_path)
    if item is not None and int(item.group(1)) < len(arguments):
        return frozenset({arguments[int(item.group(1))] + item.group(2)})
    return frozenset(argument + output_path[len("out") :] for argument in arguments)


def pairing_key(
    out: OutputLeaf, leaf: InputLeaf, mirrored: frozenset[str], sources: frozenset[int], claimed: frozenset[int]
) -> tuple[bool, ...]:
    """How well ``leaf`` pairs with output ``out`` (smaller is better): not yet named for another output,
    then the input of the same path (``mirrored``: :func:`same_path_inputs`), then of its shape and dtype,
    then one the output is computed from (``sources``: the output's input leaves by index), then one whose
    path ends as the output's does."""
    suffix = out.path[len("out") :]
    return (
        leaf.index in claimed,
        leaf.path not in mirrored,
        leaf.shape != out.shape or leaf.dtype != out.dtype,
        leaf.index not in sources,
        not (suffix and leaf.path.endswith(suffix)),
    )


def state_donor(
    out: OutputLeaf,
    size: int,
    program: ProgramLeaves,
    aliases: tuple[Alias, ...],
    state_bytes: int = 0,
    claimed: frozenset[int] = frozenset(),
) -> InputLeaf | None:
    """The input whose buffer ``out`` could reuse and whose not reusing it breaks in place, or None: a new output.

    A donated input the program reads, of the output's per-device byte size
    (XLA aliases by size, across dtype and shape), that no output reuses; or
    an input not donated whose shape and dtype are the output's (most likely
    its previous value: donating it is the fix), when the output is at least
    ``state_bytes`` (the smallest state leaf that is reused: an output smaller
    than every reused leaf, beside a state fully in place, is a new value that
    happens to have an argument's shape, such as a decode step's logits); or a donated input no output
    reuses with the output's shape in another dtype (the state, cast: the cast
    prevents the reuse). An output with none of these (fresh
    logits, a loss, a value whose donors other outputs already reuse) is a new
    output: reported, counted in the figures, but not a break.

    Among several, the input named is the one that pairs best with the output (:func:`pairing_key`: the
    input of the same path, of its shape and dtype, that it is computed from), preferring one that
    ``claimed`` (inputs already named for other outputs) does not hold.
    """
    reused = {a.input_index for a in aliases}
    used = [leaf for leaf in program.variant.inputs if leaf.hlo_parameter is not None]
    free = [
        leaf for leaf in used if leaf.donated and leaf.index not in reused and program.input_bytes[leaf.index] == size
    ]
    if not free:
        free = [
            leaf
            for leaf in used
            if not leaf.donated
            and leaf.shape == out.shape
            and leaf.dtype == out.dtype
            and program.input_bytes[leaf.index] == size
            and size >= state_bytes
        ]
    if not free:
        # a donated input of its shape cast to another dtype: the state's update, and the cast is what breaks it
        free = [leaf for leaf in used if leaf.donated and leaf.index not in reused and leaf.shape == out.shape]
    if not free:
        return None
    mirrored = same_path_inputs(out.path, program.variant.inputs)
    sources = program.sources.get(out.index, frozenset())
    return min(free, key=lambda leaf: pairing_key(out, leaf, mirrored, sources, claimed))
