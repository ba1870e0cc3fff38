"""The test adbd's packet codec (tests/adbd/packets.py), byte for byte against protocol.txt."""
import struct

import pytest

from adbd import packets
from adbd.packets import Packet


def test_header_is_six_little_endian_words_with_inverted_magic():
    data = packets.encode(Packet(packets.A_OPEN, 7, 0, b"shell:\0"), packets.A_VERSION_MIN)
    command, arg0, arg1, length, check, magic = struct.unpack("<6I", data[:24])
    assert data[:4] == b"OPEN"
    assert (command, arg0, arg1, length) == (packets.A_OPEN, 7, 0, 7)
    assert check == sum(b"shell:\0")
    assert magic == packets.A_OPEN ^ 0xFFFFFFFF
    assert data[24:] == b"shell:\0"


def test_checksum_is_zero_from_the_skip_checksum_version_on():
    data = packets.encode(Packet(packets.A_WRTE, 1, 2, b"abc"), packets.A_VERSION_SKIP_CHECKSUM)
    assert struct.unpack("<6I", data[:24])[4] == 0


def test_round_trip():
    packet = Packet(packets.A_WRTE, 3, 9, bytes(range(256)))
    data = packets.encode(packet, packets.A_VERSION_MIN)
    header = packets.decode_header(data[:24], packets.MAX_PAYLOAD)
    assert packets.check_payload(header, data[24:], packets.A_VERSION_MIN) == packet


def test_rejects_bad_magic():
    data = bytearray(packets.encode(Packet(packets.A_OKAY, 1, 2), packets.A_VERSION))
    data[20] ^= 1
    with pytest.raises(packets.PacketError, match="bad magic"):
        packets.decode_header(bytes(data[:24]), packets.MAX_PAYLOAD)


def test_rejects_unknown_command_and_oversized_payload():
    unknown = struct.pack("<6I", 0x41414141, 0, 0, 0, 0, 0x41414141 ^ 0xFFFFFFFF)
    with pytest.raises(packets.PacketError, match="unknown command"):
        packets.decode_header(unknown, packets.MAX_PAYLOAD)
    big = packets.encode(Packet(packets.A_WRTE, 1, 2, b"x" * 5000), packets.A_VERSION)
    with pytest.raises(packets.PacketError, match="exceeds"):
        packets.decode_header(big[:24], packets.MAX_PAYLOAD_V1)


def test_checks_checksum_only_before_the_skip_checksum_version():
    data = bytearray(packets.encode(Packet(packets.A_WRTE, 1, 2, b"abc"), packets.A_VERSION_MIN))
    data[-1] ^= 1
    header = packets.decode_header(bytes(data[:24]), packets.MAX_PAYLOAD)
    with pytest.raises(packets.PacketError, match="bad checksum"):
        packets.check_payload(header, bytes(data[24:]), packets.A_VERSION_MIN)
    assert packets.check_payload(header, bytes(data[24:]), packets.A_VERSION).payload == b"abb"


def test_rejects_short_payload():
    header = packets.decode_header(
        packets.encode(Packet(packets.A_WRTE, 1, 2, b"abc"), packets.A_VERSION)[:24],
        packets.MAX_PAYLOAD)
    with pytest.raises(packets.PacketError, match="short payload"):
        packets.check_payload(header, b"ab", packets.A_VERSION)
