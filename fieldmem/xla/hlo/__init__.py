"""Optimized HLO text -> a module model -> the aliases, copies, loops and sources findings ask for.

Pure text functions, no jax (tests/xla/test_hlo.py checks every module's imports), so
everything here is tested on golden text without compiling. Four modules, each
on the one below it:

- :mod:`.text`: brackets, quoted strings, top-level splitting; :class:`HloParseError`;
- :mod:`.model`: the frozen records (module, computation, instruction, loop,
  copy, source location) and shape-string arithmetic;
- :mod:`.parse`: text -> model (:func:`parse_hlo_module`, and :class:`HloParser`, which
  keeps what it parsed for the next text), the only code that
  knows how XLA prints a module;
- :mod:`.queries`: what the findings ask of a model (loops, output producers
  and the inputs they read, source lines, slice updates, constants);
- :mod:`.copies`: the copies a model keeps, on the queries (:func:`find_copies`);
- :mod:`.validate`: what the queries rely on, checked once after parsing
  (operands that exist, no cycles, bounded nesting): :class:`HloStructureError`;
- :mod:`.frames`: which frames of a source stack are library code, and the
  user's call site of a library line;

Callers use the names below (``from fieldmem.xla import hlo; hlo.find_copies(...)``).
"""

from __future__ import annotations

from .copies import find_copies
from .frames import call_site
from .model import (
    AliasEntry,
    BranchInfo,
    ConstantSite,
    CopySite,
    HloComputation,
    HloInstruction,
    HloModule,
    LoopInfo,
    SourceLocation,
    memory_space,
    shape_bytes,
    sub_shape,
    tuple_elements,
)
from .parse import HloParser, parse_hlo_module
from .queries import (
    OldValueUse,
    conditional_branches,
    find_constants,
    loop_bodies,
    old_value_use,
    output_parameters,
    output_values,
    reader_source,
    slice_update_kind,
    view_source,
)
from .text import HloParseError
from .validate import HloStructureError

__all__ = [
    "AliasEntry",
    "BranchInfo",
    "ConstantSite",
    "CopySite",
    "HloComputation",
    "HloInstruction",
    "HloModule",
    "HloParseError",
    "HloParser",
    "HloStructureError",
    "LoopInfo",
    "OldValueUse",
    "SourceLocation",
    "call_site",
    "conditional_branches",
    "find_constants",
    "find_copies",
    "loop_bodies",
    "memory_space",
    "old_value_use",
    "output_parameters",
    "output_values",
    "parse_hlo_module",
    "reader_source",
    "shape_bytes",
    "slice_update_kind",
    "sub_shape",
    "tuple_elements",
    "view_source",
]
