"""Protobuf message classes built at run time from a short schema, so that no protoc step is
needed: pprof's profile.proto (pprof.py), and views of Perfetto's messages that leave a repeated
field's entries as bytes (trace/interned_state.py)."""
from typing import Dict, List, Sequence, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {"int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64, "bool": _F.TYPE_BOOL,
          "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES}
# (message, [(field, number, type, repeated)]); a type not in _TYPES names a message of the schema.
Schema = Sequence[Tuple[str, List[Tuple[str, int, str, bool]]]]


def message_classes(file_name: str, package: str, schema: Schema) -> Dict[str, type]:
    """{message name: class} of `schema`, in a pool of their own: the names cannot clash with
    another copy of the same messages in the process."""
    proto = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    for name, fields in schema:
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            entry = message.field.add(name=field, number=number,
                                      label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if kind in _TYPES:
                entry.type = _TYPES[kind]
            else:
                entry.type, entry.type_name = _F.TYPE_MESSAGE, f".{package}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name, _ in schema}
