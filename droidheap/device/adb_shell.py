"""Shell commands over adb, bounded by what was asked for: a phone is untrusted input, and what it
sends this machine may cost no more than the command could honestly print, nor take longer than
the command's deadline. (adbutils' shell2 keeps all it is sent, and times out per read only: a
phone trickling a chunk before each timeout holds it for ever.)

`shell,v2` frames output as packets (shell_protocol.h): one id byte, a little-endian uint32
length, that many bytes. Each length the phone claims is checked against what the command has
left before any of it is read, and the data read in chunks as it comes, never allocated at the
size claimed.

run_command is called by AdbDevice on its own thread; a PacketReader belongs to the thread that
reads its stream (a ShellStream's reader thread reads one without a deadline).
"""
import contextlib
import dataclasses
import socket
import struct
import time
from typing import Iterator, Optional, Tuple

import adbutils

from droidheap.device.adb_connection import adb_errors
from droidheap.errors import DroidheapError

STDIN, STDOUT, STDERR, EXIT, CLOSE_STDIN = 0, 1, 2, 3, 4
HEADER = struct.Struct("<BI")
# One recv: a cable's pace in few calls, and never a large allocation for what has not come.
_CHUNK = 256 * 1024

# What a command can honestly print (stdout and stderr together), by kind; more ends it with an
# error. A line or a few: an id, a property's value, /proc/PID/stat or cmdline, an error message.
ANSWER_MAX_BYTES = 1 << 20
# A listing of the device's processes, their command lines, or droidheap's files there; `dumpsys
# package` of one app (a large app's is some hundreds of KiB).
LISTING_MAX_BYTES = 16 << 20


class DeadlinePassed(Exception):
    """A stream's deadline passed before what was read from it (or sent on it) came through."""


class PacketReader:
    """Reads shell v2 packets off one stream's socket; with a `deadline` (time.monotonic()), for
    the whole stream, not per read."""

    def __init__(self, sock: socket.socket, deadline: Optional[float] = None):
        self._sock = sock
        self._deadline = deadline

    def header(self) -> Tuple[int, int]:
        """(packet id, length)."""
        return HEADER.unpack(self.exact(HEADER.size))

    def pieces(self, length: int) -> Iterator[bytes]:
        """A packet's `length` bytes, in chunks as they arrive."""
        left = length
        while left:
            piece = self._recv(min(left, _CHUNK))
            left -= len(piece)
            yield piece

    def exact(self, size: int) -> bytes:
        """`size` bytes: only for sizes the caller has bounded."""
        return b"".join(self.pieces(size))

    def _recv(self, size: int) -> bytes:
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise DeadlinePassed()
            self._sock.settimeout(left)
        try:
            data = self._sock.recv(size)
        except socket.timeout:
            if self._deadline is None:
                raise
            raise DeadlinePassed() from None
        if not data:
            raise EOFError("the device closed the stream")
        return data


@dataclasses.dataclass
class CommandOutput:
    exit_code: int
    stdout: bytearray
    stderr: bytearray


def run_command(device: adbutils.AdbDevice, script: str, what: str, max_output: int,
                timeout_s: float) -> CommandOutput:
    """Runs `script` in the device's sh, its stdin at end-of-file. A DroidheapError starting with
    `what` when that fails, when the device sends more than `max_output` bytes, or when the
    command has not ended `timeout_s` after it was asked for."""
    deadline = time.monotonic() + timeout_s
    with adb_errors(what):
        connection = device.open_transport(timeout=timeout_s)
        try:
            connection.send_command(f"shell,v2,raw:{script}")
            connection.check_okay()
            # Nothing is fed to it: a command that reads stdin ends rather than waits. The
            # command may already have ended, its stream closed: then there is nothing to tell.
            with contextlib.suppress(OSError):
                connection.conn.sendall(HEADER.pack(CLOSE_STDIN, 0))
            return _read_output(PacketReader(connection.conn, deadline), what, max_output)
        except DeadlinePassed:
            raise DroidheapError(f"{what}: the device did not answer in time (the command took "
                                 f"more than {timeout_s:g} s)") from None
        finally:
            connection.close()


def _read_output(reader: PacketReader, what: str, max_output: int) -> CommandOutput:
    output = CommandOutput(255, bytearray(), bytearray())
    kept = {STDOUT: output.stdout, STDERR: output.stderr}
    received = 0
    while True:
        packet_id, length = reader.header()
        if packet_id == EXIT:
            # One byte; a longer packet is not read on: the command has ended.
            output.exit_code = reader.exact(1)[0] if length else 255
            return output
        received += length
        if received > max_output:
            raise DroidheapError(f"{what}: the device sent more than the {max_output} bytes "
                                 "this command can print")
        target = kept.get(packet_id)
        for piece in reader.pieces(length):
            if target is not None:
                target += piece
