"""One adb host connection over TCP: the CNXN handshake (no AUTH), then streams opened by the
host (OPEN/OKAY/WRTE/CLSE), each served by a service on its own thread.

A Connection is created by the server for each accepted socket and owned by the thread that runs
`serve()`; that thread alone reads the socket. Streams are written from service threads: `send`
is serialised by a lock. Flow control as in protocol.txt: after each WRTE a writer waits for the
host's OKAY; the host's WRTEs are acknowledged as soon as they are queued.
"""
import socket
import threading
from typing import Callable, Dict, Optional

from . import packets
from .packets import Packet

# The host's first CNXN may carry its own offer, up to adb's 1 MiB.
_HOST_MAX_PAYLOAD = 1024 * 1024
_FEATURES = "shell_v2,fixed_push_mkdir"


class StreamClosed(Exception):
    """The host closed the stream (or the whole connection) under a service."""


class Stream:
    """One host-opened stream. Created by the connection's thread, which delivers the host's data
    and OKAYs; read and written by the one service thread that serves it (writes may come from
    several threads of that service: each `write` is atomic)."""

    def __init__(self, connection: "Connection", local_id: int, remote_id: int):
        self.connection = connection
        self.local_id = local_id
        self.remote_id = remote_id
        self._buffer = bytearray()
        self._eof = False
        self._acked = threading.Event()
        self._state = threading.Condition()
        self._write_lock = threading.Lock()
        self._closed_by_us = False

    # Called on the connection's thread --------------------------------------------------------
    def deliver(self, data: bytes) -> None:
        with self._state:
            self._buffer += data
            self._state.notify_all()

    def acknowledge(self) -> None:
        self._acked.set()

    def remote_closed(self) -> None:
        """Also called once we have closed it: wakes every reader and writer of the service."""
        with self._state:
            self._eof = True
            self._state.notify_all()
        self._acked.set()

    # Called on service threads ----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        with self._state:
            return self._eof

    def read_some(self, limit: int = 1 << 20) -> bytes:
        """At least one byte, or b"" once the host has closed the stream."""
        with self._state:
            while not self._buffer and not self._eof:
                self._state.wait()
            data = bytes(self._buffer[:limit])
            del self._buffer[:limit]
            return data

    def read_exact(self, size: int) -> bytes:
        with self._state:
            while len(self._buffer) < size and not self._eof:
                self._state.wait()
            if len(self._buffer) < size:
                raise StreamClosed()
            data = bytes(self._buffer[:size])
            del self._buffer[:size]
            return data

    def write(self, data: bytes) -> None:
        with self._write_lock:
            for start in range(0, len(data), self.connection.max_payload):
                chunk = data[start:start + self.connection.max_payload]
                self._acked.clear()
                if self.closed:
                    raise StreamClosed()
                self.connection.send(Packet(packets.A_WRTE, self.local_id, self.remote_id, chunk))
                self._acked.wait()
                if self.closed:
                    raise StreamClosed()

    def close(self) -> None:
        with self._write_lock:
            if self._closed_by_us:
                return
            self._closed_by_us = True
        self.connection.close_stream(self)
        self.remote_closed()


# A service gets its stream and the rest of the service string ("shell,v2:" -> "v2:...").
Service = Callable[[Stream, str], None]


class Connection:
    def __init__(self, sock: socket.socket, services: Dict[str, Service], banner_props: str,
                 log: Callable[[str], None]):
        self._sock = sock
        self._services = services
        self._banner_props = banner_props
        self._log = log
        self.version = packets.A_VERSION
        self.max_payload = packets.MAX_PAYLOAD
        self._send_lock = threading.Lock()
        self._streams: Dict[int, Stream] = {}
        self._streams_lock = threading.Lock()
        self._next_id = 1

    def send(self, packet: Packet) -> None:
        data = packets.encode(packet, self.version)
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError:
                pass  # the reader sees the broken connection and closes every stream

    def close_stream(self, stream: Stream) -> None:
        with self._streams_lock:
            known = self._streams.pop(stream.local_id, None) is not None
        if known:
            self.send(Packet(packets.A_CLSE, stream.local_id, stream.remote_id))

    def _read_exact(self, size: int) -> Optional[bytes]:
        data = bytearray()
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    def _read_packet(self, connected: bool) -> Optional[Packet]:
        raw = self._read_exact(packets.HEADER.size)
        if raw is None:
            return None
        limit = self.max_payload if connected else _HOST_MAX_PAYLOAD
        header = packets.decode_header(raw, limit)
        payload = self._read_exact(header.length) if header.length else b""
        if payload is None:
            return None
        return packets.check_payload(header, payload, self.version)

    def serve(self) -> None:
        connected = False
        try:
            while True:
                packet = self._read_packet(connected)
                if packet is None:
                    return
                if packet.command == packets.A_CNXN:
                    self._handle_connect(packet)
                    connected = True
                elif not connected:
                    raise packets.PacketError(f"{packet.name} before CNXN")
                else:
                    self._handle(packet)
        except (packets.PacketError, OSError) as e:
            self._log(f"connection dropped: {e}")
        finally:
            with self._streams_lock:
                streams, self._streams = list(self._streams.values()), {}
            for stream in streams:
                stream.remote_closed()
            self._sock.close()

    def _handle_connect(self, packet: Packet) -> None:
        if packet.arg0 < packets.A_VERSION_MIN:
            raise packets.PacketError(f"host protocol version {packet.arg0:#x} is too old")
        self.version = min(packet.arg0, packets.A_VERSION)
        self.max_payload = min(packet.arg1, packets.MAX_PAYLOAD)
        if self.max_payload < packets.MAX_PAYLOAD_V1:
            raise packets.PacketError(f"host maximum payload {packet.arg1} is too small")
        banner = f"device::{self._banner_props}features={_FEATURES}".encode()
        self.send(Packet(packets.A_CNXN, self.version, self.max_payload, banner))

    def _handle(self, packet: Packet) -> None:
        if packet.command == packets.A_OPEN:
            self._open(packet.arg0, packet.payload.rstrip(b"\0").decode(errors="replace"))
            return
        with self._streams_lock:
            stream = self._streams.get(packet.arg1)
        if stream is None or stream.remote_id != packet.arg0:
            return  # a stream already closed on our side: its late packets are dropped
        if packet.command == packets.A_WRTE:
            # Acknowledged before the service sees it, so the OKAY precedes anything it answers.
            self.send(Packet(packets.A_OKAY, stream.local_id, stream.remote_id))
            stream.deliver(packet.payload)
        elif packet.command == packets.A_OKAY:
            stream.acknowledge()
        elif packet.command == packets.A_CLSE:
            with self._streams_lock:
                self._streams.pop(stream.local_id, None)
            stream.remote_closed()

    def _open(self, remote_id: int, destination: str) -> None:
        for prefix, service in self._services.items():
            if destination.startswith(prefix):
                break
        else:
            self._log(f"unknown service {destination!r}")
            self.send(Packet(packets.A_CLSE, 0, remote_id))
            return
        with self._streams_lock:
            local_id = self._next_id
            self._next_id += 1
            stream = Stream(self, local_id, remote_id)
            self._streams[local_id] = stream
        self.send(Packet(packets.A_OKAY, local_id, remote_id))
        threading.Thread(target=self._run_service, args=(service, stream, destination[len(prefix):]),
                         daemon=True).start()

    def _run_service(self, service: Service, stream: Stream, rest: str) -> None:
        try:
            service(stream, rest)
        except StreamClosed:
            pass
        finally:
            stream.close()
