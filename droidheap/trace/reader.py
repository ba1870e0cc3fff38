"""Reads a Perfetto trace packet by packet.

A trace is a `Trace` message: a run of `packet` fields (field 1, length-delimited). The framing is
decoded by hand rather than with `Trace.FromString` so that one damaged packet -- typically the
last one, cut short when the daemon or the adb link died -- costs only itself: every packet before
it is still returned, and the damage is reported as counts.
"""
import dataclasses
import functools
from typing import List, Tuple

from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

_PACKET_FIELD = 1
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_BYTES, _WIRE_FIXED32 = 0, 1, 2, 5


def as_text(value) -> str:
    """A string field as read: protobuf hands over a proto2 string that is not UTF-8 (damage, or
    a writer's bug) as bytes."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class FramingError(ValueError):
    """The bytes at some offset are not a valid protobuf field."""


def read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    """Decodes the varint at `pos`; returns (value, position after it)."""
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise FramingError("varint runs past the end of the data")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise FramingError("varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


@functools.lru_cache(maxsize=None)
def _bytes_tag(field: int) -> bytes:
    return encode_varint(field << 3 | _WIRE_BYTES)


def encode_bytes_field(field: int, payload: bytes) -> bytes:
    """One length-delimited field: tag, length, payload. (The pprof writer frames hundreds of
    thousands: the tag is made once, a length under 128 is its own byte.)"""
    size = len(payload)
    return _bytes_tag(field) + (bytes((size,)) if size < 0x80 else encode_varint(size)) + payload


def iter_fields(data: bytes):
    """Yields (field number, wire type, value, end offset) of a message's top-level fields, where
    value is an int for varints and fixed-width fields and bytes for length-delimited ones; raises
    FramingError at the first field that cannot be framed."""
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == _WIRE_VARINT:
            value, pos = read_varint(data, pos)
        elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
            size = 8 if wire == _WIRE_FIXED64 else 4
            if pos + size > len(data):
                raise FramingError(f"field {field} runs past the end of the data")
            value, pos = int.from_bytes(data[pos:pos + size], "little"), pos + size
        elif wire == _WIRE_BYTES:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise FramingError(f"field {field} runs past the end of the data")
            value, pos = data[pos:pos + size], pos + size
        else:
            raise FramingError(f"field {field} has unsupported wire type {wire}")
        yield field, wire, value, pos


@dataclasses.dataclass
class TraceContents:
    packets: List[pb.TracePacket]
    # Bytes from the start of the file through the last intact packet frame: what may safely be
    # extended with more packets (anything after it is a torn frame).
    intact_length: int
    # Bytes after intact_length: a packet cut short (or garbage) that cannot be framed.
    unframed_bytes: int = 0
    # Packets framed correctly whose contents do not parse.
    corrupt_packets: int = 0

    @property
    def warnings(self) -> List[str]:
        out = []
        if self.unframed_bytes:
            out.append(f"the trace ends in a truncated or corrupt packet: it was cut short or "
                       f"damaged after {self.intact_length} bytes ({self.unframed_bytes} bytes "
                       f"dropped); the {_packets(len(self.packets))} before it are read")
        if self.corrupt_packets:
            out.append(f"the trace is damaged: {_packets(self.corrupt_packets)} could not be "
                       "decoded and were skipped; the others are read")
        return out


def _packets(count: int) -> str:
    return f"{count} packet" + ("" if count == 1 else "s")


def parse_trace(data: bytes) -> TraceContents:
    """Splits `data` into TracePackets. Never raises on bad input: a frame that cannot be decoded
    ends the walk (nothing after it can be framed) and is counted, as is a well-framed packet
    whose contents do not parse."""
    contents = TraceContents(packets=[], intact_length=0)
    try:
        for field, wire, value, end in iter_fields(data):
            contents.intact_length = end
            if field != _PACKET_FIELD or wire != _WIRE_BYTES:
                continue  # Trace has no other fields today; skip any a newer writer might add.
            try:
                contents.packets.append(pb.TracePacket.FromString(value))
            except DecodeError:
                contents.corrupt_packets += 1
    except FramingError:
        contents.unframed_bytes = len(data) - contents.intact_length
    return contents
