"""adb's transport packets (protocol.txt): a 24-byte header of six little-endian uint32s
(command, arg0, arg1, payload length, payload checksum, command ^ 0xffffffff), then the payload.

Pure functions, no I/O: the connection (transport.py) reads and writes them.
"""
import dataclasses
import struct

A_CNXN = 0x4E584E43
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_WRTE = 0x45545257
A_CLSE = 0x45534C43
A_AUTH = 0x48545541
A_SYNC = 0x434E5953
A_STLS = 0x534C5453
COMMAND_NAMES = {A_CNXN: "CNXN", A_OPEN: "OPEN", A_OKAY: "OKAY", A_WRTE: "WRTE",
                 A_CLSE: "CLSE", A_AUTH: "AUTH", A_SYNC: "SYNC", A_STLS: "STLS"}

A_VERSION_MIN = 0x01000000
# From this version on, the payload checksum is neither sent (0) nor checked.
A_VERSION_SKIP_CHECKSUM = 0x01000001
A_VERSION = A_VERSION_SKIP_CHECKSUM
MAX_PAYLOAD_V1 = 4096
# What this device offers; the connection uses the smaller of this and the host's offer.
MAX_PAYLOAD = 256 * 1024

HEADER = struct.Struct("<6I")


class PacketError(Exception):
    """A header or payload that breaks the protocol: the connection is dropped."""


@dataclasses.dataclass
class Packet:
    command: int
    arg0: int
    arg1: int
    payload: bytes = b""

    @property
    def name(self) -> str:
        return COMMAND_NAMES.get(self.command, f"{self.command:#x}")


def checksum(payload: bytes) -> int:
    return sum(payload) & 0xFFFFFFFF


def encode(packet: Packet, version: int) -> bytes:
    check = checksum(packet.payload) if version < A_VERSION_SKIP_CHECKSUM else 0
    return HEADER.pack(packet.command, packet.arg0, packet.arg1, len(packet.payload), check,
                       packet.command ^ 0xFFFFFFFF) + packet.payload


@dataclasses.dataclass
class Header:
    command: int
    arg0: int
    arg1: int
    length: int
    check: int


def decode_header(data: bytes, max_payload: int) -> Header:
    if len(data) != HEADER.size:
        raise PacketError(f"short header ({len(data)} bytes)")
    command, arg0, arg1, length, check, magic = HEADER.unpack(data)
    if magic != command ^ 0xFFFFFFFF:
        raise PacketError(f"bad magic {magic:#x} for command {command:#x}")
    if command not in COMMAND_NAMES:
        raise PacketError(f"unknown command {command:#x}")
    if length > max_payload:
        raise PacketError(f"payload of {length} bytes exceeds the maximum {max_payload}")
    return Header(command, arg0, arg1, length, check)


def check_payload(header: Header, payload: bytes, version: int) -> Packet:
    """The packet, once its payload has been read; checks the checksum when the version has one."""
    if len(payload) != header.length:
        raise PacketError(f"short payload ({len(payload)} of {header.length} bytes)")
    if version < A_VERSION_SKIP_CHECKSUM and checksum(payload) != header.check:
        raise PacketError(f"bad checksum {header.check:#x}, payload sums to {checksum(payload):#x}")
    return Packet(header.command, header.arg0, header.arg1, payload)
