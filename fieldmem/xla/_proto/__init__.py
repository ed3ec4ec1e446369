"""The few XLA protobuf messages fieldmem reads, defined at run time (no protoc step).

Field numbers are those of XLA's ``xla/service/hlo.proto`` (read from
openxla/xla ``xla/service/hlo.proto`` and tensorflow/tensorflow
``third_party/xla/xla/service/hlo.proto``). Only the fields fieldmem needs are
declared: every other field of the real messages is an unknown field to these
definitions, which protobuf skips (and keeps) while parsing, so messages written
by a newer XLA still parse. Fields that are absent read as their defaults.

Observed with jaxlib 0.10.2 and not in the proto text above: a top-level
field 5 of ``BufferAssignmentProto`` and a field 4 of
``BufferAllocationProto.Assigned``. Their meaning is not documented where we
could read it, so they are left undeclared (ignored).

Pure data definitions, no jax: only the ``protobuf`` package.

The messages live in a private :class:`DescriptorPool`, under the package
``fieldmem_xla``, so they never clash with a real ``xla`` package that another
library may have registered in the default pool.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "BufferAssignmentProto",
    "HloModuleProto",
    "HloProtoParts",
]

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED
_PACKAGE = "fieldmem_xla"


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    *,
    repeated: bool = False,
    type_name: str | None = None,
) -> None:
    field = message.field.add(
        name=name,
        number=number,
        type=kind,
        label=_REPEATED if repeated else _OPTIONAL,
    )
    if type_name is not None:
        field.type_name = f".{_PACKAGE}.{type_name}"


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="fieldmem/_xla_proto/hlo_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    i64, b, s = _F.TYPE_INT64, _F.TYPE_BOOL, _F.TYPE_STRING
    msg, enum = _F.TYPE_MESSAGE, _F.TYPE_ENUM

    # message LogicalBufferProto { message Location {...} id=1 size=2 defined_at=3 color=4 }
    logical = file.message_type.add(name="LogicalBufferProto")
    location = logical.nested_type.add(name="Location")
    _field(location, "instruction_name", 2, s)  # deprecated upstream, still read if set
    _field(location, "shape_index", 3, i64, repeated=True)
    _field(location, "instruction_id", 4, i64)
    _field(logical, "id", 1, i64)
    _field(logical, "size", 2, i64)
    _field(logical, "defined_at", 3, msg, type_name="LogicalBufferProto.Location")
    _field(logical, "color", 4, i64)

    # message BufferAllocationProto { message Assigned {...} ... }
    allocation = file.message_type.add(name="BufferAllocationProto")
    assigned = allocation.nested_type.add(name="Assigned")
    _field(assigned, "logical_buffer_id", 1, i64)
    _field(assigned, "offset", 2, i64)
    _field(assigned, "size", 3, i64)
    _field(allocation, "index", 1, i64)
    _field(allocation, "size", 2, i64)
    _field(allocation, "is_thread_local", 3, b)
    _field(allocation, "is_entry_computation_parameter", 5, b)
    _field(allocation, "parameter_number", 6, i64)
    _field(allocation, "maybe_live_out", 7, b)
    _field(allocation, "color", 8, i64)
    _field(allocation, "assigned", 9, msg, repeated=True, type_name="BufferAllocationProto.Assigned")
    _field(allocation, "parameter_shape_index", 10, i64, repeated=True)
    _field(allocation, "is_tuple", 11, b)
    _field(allocation, "is_constant", 12, b)

    # message HeapSimulatorTrace { message Event { enum Kind ... } events=1 ... }
    trace = file.message_type.add(name="HeapSimulatorTrace")
    event = trace.nested_type.add(name="Event")
    kind = event.enum_type.add(name="Kind")
    for number, name in enumerate(("ALLOC", "FREE", "SHARE_WITH")):
        kind.value.add(name=name, number=number)
    _field(event, "kind", 1, enum, type_name="HeapSimulatorTrace.Event.Kind")
    _field(event, "buffer_id", 2, i64)
    _field(event, "computation_name", 3, s)
    _field(event, "instruction_name", 4, s)
    _field(event, "share_with_canonical_id", 5, i64)
    _field(trace, "events", 1, msg, repeated=True, type_name="HeapSimulatorTrace.Event")
    _field(trace, "whole_module_simulation", 2, b)
    _field(trace, "buffer_allocation_index", 3, i64)

    # message BufferAssignmentProto { message BufferAlias {...} ... }
    assignment = file.message_type.add(name="BufferAssignmentProto")
    alias = assignment.nested_type.add(name="BufferAlias")
    _field(alias, "source_buffer_id", 1, i64)
    _field(alias, "location", 2, msg, type_name="LogicalBufferProto.Location")
    _field(assignment, "logical_buffers", 1, msg, repeated=True, type_name="LogicalBufferProto")
    _field(assignment, "buffer_aliases", 2, msg, repeated=True, type_name="BufferAssignmentProto.BufferAlias")
    _field(assignment, "buffer_allocations", 3, msg, repeated=True, type_name="BufferAllocationProto")
    _field(assignment, "heap_simulator_traces", 4, msg, repeated=True, type_name="HeapSimulatorTrace")

    # HloModuleProto, only what maps instruction ids to names:
    # HloInstructionProto { name=1 opcode=2 parameter_number=9 id=35 called_computation_ids=38 }
    instruction = file.message_type.add(name="HloInstructionProto")
    _field(instruction, "name", 1, s)
    _field(instruction, "opcode", 2, s)
    _field(instruction, "parameter_number", 9, i64)
    _field(instruction, "id", 35, i64)
    _field(instruction, "called_computation_ids", 38, i64, repeated=True)
    # HloComputationProto { name=1 instructions=2 id=5 root_id=6 }
    computation = file.message_type.add(name="HloComputationProto")
    _field(computation, "name", 1, s)
    _field(computation, "instructions", 2, msg, repeated=True, type_name="HloInstructionProto")
    _field(computation, "id", 5, i64)
    _field(computation, "root_id", 6, i64)
    # HloModuleProto { name=1 entry_computation_name=2 computations=3 id=5 entry_computation_id=6 }
    module = file.message_type.add(name="HloModuleProto")
    _field(module, "name", 1, s)
    _field(module, "entry_computation_name", 2, s)
    _field(module, "computations", 3, msg, repeated=True, type_name="HloComputationProto")
    _field(module, "id", 5, i64)
    _field(module, "entry_computation_id", 6, i64)
    # HloProto { hlo_module=1 buffer_assignment=3 }, both read as bytes (a message's wire form is a
    # length-delimited field, as bytes are): split without decoding the module, decoded where needed
    parts = file.message_type.add(name="HloProtoParts")
    _field(parts, "hlo_module", 1, _F.TYPE_BYTES)
    _field(parts, "buffer_assignment", 3, _F.TYPE_BYTES)
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())

BufferAssignmentProto = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName(f"{_PACKAGE}.BufferAssignmentProto")
)
HloModuleProto = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.HloModuleProto"))
HloProtoParts = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.HloProtoParts"))
