"""The call's array leaves as one compiled program sees them (:class:`ProgramLeaves`), and a source
line as the findings show it.

Shared by the variant analysis (:mod:`fieldmem.findings.variant`), the findings in words and the
advisor (:mod:`fieldmem.findings.advisor`). It never imports jax and never prints.
"""

from __future__ import annotations

from collections.abc import Sequence

from fieldmem.findings.transfers import shared_buffers
from fieldmem.model.libraries import is_library_file
from fieldmem.model.readings import CompiledVariant, InputLeaf, OutputLeaf
from fieldmem.request.definitions import display_path
from fieldmem.xla import hlo

__all__ = ["ProgramLeaves", "display_source", "shape_text", "user_call_site"]


def display_source(location: hlo.SourceLocation | None) -> str | None:
    if location is None:
        return None
    return f"{display_path(location.file)}:{location.line}"


def user_call_site(location: hlo.SourceLocation | None) -> str | None:
    """The user's line that led to ``location`` when that is library code (see fieldmem.xla.hlo.frames)."""
    return display_source(hlo.call_site(location, is_library_file))


class ProgramLeaves:
    """The call's array leaves as one compiled program sees them.

    Per leaf: its per-device bytes, the HLO parameter it is (or None when jit
    dropped it), and for each output the instruction producing it and its
    source line. Public for :mod:`fieldmem.findings.advisor`, which asks it
    which outputs a leaf could reuse before compiling a donation.
    """

    def __init__(self, variant: CompiledVariant, module: hlo.HloModule) -> None:
        self.variant = variant
        self.module = module
        self.by_parameter: dict[int, InputLeaf] = {
            leaf.hlo_parameter: leaf for leaf in variant.inputs if leaf.hlo_parameter is not None
        }
        # per-device sizes from the compiled program (they differ from the
        # global ones when inputs are sharded)
        self.input_bytes: dict[int, int] = {}
        shapes = module.entry_parameter_shapes
        for leaf in variant.inputs:
            if leaf.hlo_parameter is None:
                self.input_bytes[leaf.index] = leaf.bytes
            elif variant.tuple_args and len(shapes) == 1:
                elements = hlo.tuple_elements(shapes[0])
                self.input_bytes[leaf.index] = (
                    hlo.shape_bytes(elements[leaf.hlo_parameter]) if leaf.hlo_parameter < len(elements) else leaf.bytes
                )
            elif leaf.hlo_parameter < len(shapes):
                self.input_bytes[leaf.index] = hlo.shape_bytes(shapes[leaf.hlo_parameter])
            else:
                self.input_bytes[leaf.index] = leaf.bytes
        result_shapes = hlo.tuple_elements(module.entry_result_shape) if module.entry_result_shape else []
        self.output_bytes: dict[int, int] = {}
        for out in variant.outputs:
            if len(result_shapes) == len(variant.outputs):
                self.output_bytes[out.index] = hlo.shape_bytes(result_shapes[out.index])
            else:
                self.output_bytes[out.index] = out.bytes
        self.output_producers = hlo.output_values(module)
        self.entry_by_name = module.entry.by_name()
        # the arrays the call gives more than once, each of their leaves -> all of them (see shared_buffers)
        self.shared = shared_buffers(variant.inputs)
        self._sources: dict[int, frozenset[int]] | None = None

    @property
    def sources(self) -> dict[int, frozenset[int]]:
        """For each output index, the input leaves (by report index) it is computed from, read from the HLO's
        operands (:func:`fieldmem.xla.hlo.output_parameters`: a superset, never a miss)."""
        if self._sources is None:
            found: dict[int, frozenset[int]] = {}
            for index, parameters in enumerate(hlo.output_parameters(self.module)):
                leaves = (self.leaf_of(number, tuple_index) for number, tuple_index in parameters)
                found[index] = frozenset(leaf.index for leaf in leaves if leaf is not None)
            self._sources = found
        return self._sources

    def leaf_of(self, parameter_number: int, parameter_index: tuple[int, ...]) -> InputLeaf | None:
        if self.variant.tuple_args:
            if parameter_number == 0 and parameter_index:
                return self.by_parameter.get(parameter_index[0])
            return None
        return self.by_parameter.get(parameter_number)

    def output_of(self, output_index: tuple[int, ...]) -> OutputLeaf | None:
        outputs = self.variant.outputs
        if not output_index:
            return outputs[0] if len(outputs) == 1 else None
        return outputs[output_index[0]] if output_index[0] < len(outputs) else None

    def output_location(self, index: int) -> hlo.SourceLocation | None:
        if index >= len(self.output_producers):
            return None
        return hlo.view_source(self.output_producers[index], self.entry_by_name)


def shape_text(shape: Sequence[int], dtype: str) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]"
