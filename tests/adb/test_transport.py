"""The test adbd's connection (tests/adbd/transport.py) against a scripted host on a socketpair:
handshake per version, stream ids, payload limits, checksums, flow control."""
import socket
import threading

import pytest

from adbd import packets
from adbd.packets import Packet
from adbd.transport import Connection


class FakeHost:
    """The host side, speaking `version` and offering `max_payload`."""

    def __init__(self, services, version, max_payload):
        self.sock, device_sock = socket.socketpair()
        self.sock.settimeout(10)
        self.version = version
        connection = Connection(device_sock, services, "ro.product.name=t;", lambda message: None)
        threading.Thread(target=connection.serve, daemon=True).start()
        self.send(Packet(packets.A_CNXN, version, max_payload, b"host::features=shell_v2"))
        self.banner = self.receive()

    def send(self, packet):
        self.sock.sendall(packets.encode(packet, self.version))

    def receive(self) -> Packet:
        raw = self._exact(packets.HEADER.size)
        header = packets.decode_header(raw, 1 << 20)
        packet = packets.check_payload(header, self._exact(header.length), self.version)
        if self.version < packets.A_VERSION_SKIP_CHECKSUM:
            assert header.check == packets.checksum(packet.payload)
        return packet

    def _exact(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "device closed the connection"
            data += chunk
        return data


def echo_twice(stream, rest):
    """Answers the service suffix, then echoes what the host writes, twice over."""
    stream.write(rest.encode())
    data = stream.read_exact(5)
    stream.write(data * 2000)


@pytest.mark.parametrize("version,offer,expected_payload", [
    (packets.A_VERSION_MIN, packets.MAX_PAYLOAD_V1, packets.MAX_PAYLOAD_V1),
    (packets.A_VERSION_SKIP_CHECKSUM, 1 << 20, packets.MAX_PAYLOAD),
])
def test_stream_life_cycle(version, offer, expected_payload):
    host = FakeHost({"echo:": echo_twice}, version, offer)
    assert host.banner.name == "CNXN"
    assert (host.banner.arg0, host.banner.arg1) == (version, expected_payload)
    assert host.banner.payload.startswith(b"device::ro.product.name=t;features=")

    host.send(Packet(packets.A_OPEN, 77, 0, b"echo:hello\0"))
    okay = host.receive()
    assert (okay.name, okay.arg1) == ("OKAY", 77) and okay.arg0 != 0
    local = okay.arg0
    first = host.receive()
    assert (first.name, first.arg0, first.arg1, first.payload) == ("WRTE", local, 77, b"hello")
    host.send(Packet(packets.A_OKAY, 77, local))

    host.send(Packet(packets.A_WRTE, 77, local, b"abcde"))
    assert host.receive() == Packet(packets.A_OKAY, local, 77)
    echoed = b""
    while len(echoed) < 10000:
        packet = host.receive()
        assert packet.name == "WRTE" and len(packet.payload) <= expected_payload
        echoed += packet.payload
        host.send(Packet(packets.A_OKAY, 77, local))  # the device waits for this before more
    assert echoed == b"abcde" * 2000
    assert host.receive() == Packet(packets.A_CLSE, local, 77)


def test_unknown_service_is_refused_with_close():
    host = FakeHost({}, packets.A_VERSION, 1 << 20)
    host.send(Packet(packets.A_OPEN, 5, 0, b"reboot:\0"))
    assert host.receive() == Packet(packets.A_CLSE, 0, 5)


def test_packet_before_connect_drops_the_connection():
    host_sock, device_sock = socket.socketpair()
    host_sock.settimeout(10)
    threading.Thread(target=Connection(device_sock, {}, "", lambda m: None).serve,
                     daemon=True).start()
    host_sock.sendall(packets.encode(Packet(packets.A_OPEN, 1, 0, b"shell:\0"), packets.A_VERSION))
    assert host_sock.recv(100) == b""
