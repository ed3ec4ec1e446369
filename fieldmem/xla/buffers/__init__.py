"""XLA's buffer assignment -> live ranges, the memory curve, the live peak.

Pure bytes and records, no jax (tests/xla/test_hlo.py checks every xla module's
imports). Three modules:

- :mod:`.decode`: the serialized ``BufferAssignmentProto`` (and the
  ``HloModuleProto`` that names its instruction ids) -> allocations, assigned
  slices and logical buffers;
- :mod:`.values`: each logical buffer over the HLO it names (its slice, shape and source
  line) and which values each instruction's output holds;
- :mod:`.liveness`: those records over the scheduled HLO
  (:mod:`fieldmem.xla.hlo`) -> each value's live range, the curve of the bytes
  the live slices cover (per allocation, the union of their byte ranges) and its peak (``live_peak_bytes``).

The product's path, as ``fieldmem.findings.liveness`` takes it::

    assignment = buffers.decode_buffer_assignment(proto_bytes, module_proto_bytes)
    live = buffers.analyze_liveness(assignment, hlo.parse_hlo_module(hlo_text))
"""

from __future__ import annotations

from .decode import (
    Allocation,
    AssignedBuffer,
    BufferAlias,
    BufferAssignment,
    BufferAssignmentError,
    HeapEvent,
    HeapTrace,
    LogicalBuffer,
    decode_async_wrappers,
    decode_buffer_assignment,
    decode_instruction_ids,
    split_hlo_proto,
)
from .liveness import (
    LiveAnalysis,
    LiveRange,
    LiveSlice,
    MemorySpacePeak,
    SchedulePoint,
    analyze_liveness,
)
from .values import Slice, ValueInfo

__all__ = [
    "Allocation",
    "AssignedBuffer",
    "BufferAlias",
    "BufferAssignment",
    "BufferAssignmentError",
    "HeapEvent",
    "HeapTrace",
    "LiveAnalysis",
    "LiveRange",
    "LiveSlice",
    "LogicalBuffer",
    "MemorySpacePeak",
    "SchedulePoint",
    "Slice",
    "ValueInfo",
    "analyze_liveness",
    "decode_async_wrappers",
    "decode_buffer_assignment",
    "decode_instruction_ids",
    "split_hlo_proto",
]
