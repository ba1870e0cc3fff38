"""File transfer with an adb device: the `sync:` service (SYNC.TXT), version 1, on one stream
per call. Requests and answers are a 4-byte id and a little-endian uint32, then that many bytes;
every answer is read exactly and checked (adbutils' own sync client asserts on them).

SyncClient is owned by its AdbDevice; not thread-safe (one transfer at a time).
"""
import contextlib
import dataclasses
import pathlib
import stat
import struct
import time
from typing import Callable, Optional

import adbutils

from droidheap.device.adb_connection import adb_errors
from droidheap.device.adb_shell import DeadlinePassed, PacketReader
from droidheap.errors import DroidheapError
from droidheap.output_files import open_output

_DATA_MAX = 64 * 1024  # SYNC_DATA_MAX: the largest DATA chunk either side may send
_PATH_MAX = 1024
_TIMEOUT_S = 60.0
# A pull's pace: a device that trickles a file (a chunk before each read's timeout) is given up
# once it has averaged less than this over more than the grace period.
MIN_PULL_RATE_BYTES_S = 64 * 1024
PULL_RATE_GRACE_S = 60.0
_WORD = struct.Struct("<4sI")
_STAT = struct.Struct("<III")


@contextlib.contextmanager
def _deadline(what: str, timeout_s: float):
    """Turns a passed deadline into one error line."""
    try:
        yield
    except DeadlinePassed:
        raise DroidheapError(f"{what}: the device did not answer in time (the call took more "
                             f"than {timeout_s:.0f} s)") from None


def _send_by(sock, data: bytes, deadline: float) -> None:
    """sendall, done by `deadline` (time.monotonic()) or DeadlinePassed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlinePassed()
    sock.settimeout(left)
    try:
        sock.sendall(data)
    except TimeoutError:
        raise DeadlinePassed() from None


@dataclasses.dataclass
class RemoteStat:
    mode: int
    size: int
    mtime: int

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class SyncClient:
    def __init__(self, device: adbutils.AdbDevice):
        self._device = device

    def _open(self, request: bytes, path: str):
        encoded = path.encode()
        if len(encoded) > _PATH_MAX:
            raise DroidheapError(f"device path too long: {path}")
        connection = self._device.open_transport(timeout=_TIMEOUT_S)
        try:
            connection.send_command("sync:")
            connection.check_okay()
            connection.conn.sendall(_WORD.pack(request, len(encoded)) + encoded)
        except BaseException:
            connection.close()
            raise
        return connection

    @staticmethod
    def _read_word(connection):
        return _WORD.unpack(connection.read_exact(_WORD.size))

    @staticmethod
    def _failure(read_exact: Callable[[int], bytes], length: int) -> str:
        # adbd's reasons are an errno's text; a longer "reason" is not read, let alone kept.
        if length > _DATA_MAX:
            return f"failed, with a reason of {length} bytes"
        return read_exact(length).decode(errors="replace") if length else "failed"

    @staticmethod
    def _quit(connection) -> None:
        # After a FAIL the device may already have closed the stream: QUIT is a courtesy.
        with contextlib.suppress(OSError):
            connection.conn.sendall(_WORD.pack(b"QUIT", 0))
        connection.close()

    def stat(self, path: str) -> Optional[RemoteStat]:
        """lstat of a device path; None when it does not exist (or cannot be seen). Answered
        within _TIMEOUT_S, however the device paces its bytes."""
        what = f"cannot stat {path} on the device"
        with adb_errors(what), _deadline(what, _TIMEOUT_S):
            connection = self._open(b"STAT", path)
            try:
                reader = PacketReader(connection.conn, time.monotonic() + _TIMEOUT_S)
                answer = reader.exact(4)
                if answer != b"STAT":
                    raise DroidheapError(f"cannot stat {path}: unexpected answer {answer!r}")
                mode, size, mtime = _STAT.unpack(reader.exact(_STAT.size))
            finally:
                self._quit(connection)
        return RemoteStat(mode, size, mtime) if mode else None

    def push(self, local: pathlib.Path, remote: str, mode: int = 0o755) -> None:
        """Sends `local`, done and answered at MIN_PULL_RATE_BYTES_S or faster after
        PULL_RATE_GRACE_S (as a pull must be): a device that takes it in a byte at a time is
        given up."""
        what = f"cannot push {local} to {remote}"
        timeout_s = PULL_RATE_GRACE_S + local.stat().st_size / MIN_PULL_RATE_BYTES_S
        deadline = time.monotonic() + timeout_s
        with adb_errors(what), _deadline(what, timeout_s), open(local, "rb") as source:
            connection = self._open(b"SEND", f"{remote},{stat.S_IFREG | mode}")
            try:
                while chunk := source.read(_DATA_MAX):
                    _send_by(connection.conn, _WORD.pack(b"DATA", len(chunk)) + chunk, deadline)
                _send_by(connection.conn, _WORD.pack(b"DONE", int(time.time())), deadline)
                reader = PacketReader(connection.conn, deadline)
                answer, length = _WORD.unpack(reader.exact(_WORD.size))
                if answer == b"FAIL":
                    raise DroidheapError(f"cannot push to {remote}: "
                                         f"{self._failure(reader.exact, length)}")
                if answer != b"OKAY":
                    raise DroidheapError(f"cannot push to {remote}: unexpected answer {answer!r}")
            finally:
                self._quit(connection)

    def pull(self, remote: str, local: pathlib.Path, limit: int,
             received: Callable[[int], None] = lambda length: None) -> None:
        """Takes at most `limit` bytes, at MIN_PULL_RATE_BYTES_S or faster: the device says when
        the file ends, and a hostile one never would. `received(bytes)` is told of each chunk as
        it arrives. `local` appears once the whole file has (open_output: no partial file,
        nothing written through a link at its name)."""
        with adb_errors(f"cannot pull {remote}"), open_output(local) as target:
            connection = self._open(b"RECV", remote)
            started, total = time.monotonic(), 0
            try:
                while True:
                    answer, length = self._read_word(connection)
                    if answer == b"DONE":
                        break
                    if answer == b"FAIL":
                        raise DroidheapError(f"cannot pull {remote}: "
                                             f"{self._failure(connection.read_exact, length)}")
                    if answer != b"DATA" or length > _DATA_MAX:
                        raise DroidheapError(f"cannot pull {remote}: unexpected answer "
                                             f"{answer!r} of {length} bytes")
                    total += length
                    if total > limit:
                        raise DroidheapError(f"cannot pull {remote}: the device sent more than "
                                             f"{limit} bytes of it")
                    target.write(connection.read_exact(length))
                    received(length)
                    elapsed = time.monotonic() - started
                    if elapsed > PULL_RATE_GRACE_S and total < MIN_PULL_RATE_BYTES_S * elapsed:
                        raise DroidheapError(f"cannot pull {remote}: the device sent {total} "
                                             f"bytes in {elapsed:.0f} s, too slowly to go on")
            finally:
                self._quit(connection)
