"""The `sync:` service (SYNC.TXT): requests of a 4-byte id, a little-endian uint32 length and
that many bytes (a path), answered in kind. Version 1 only, as advertised (no stat_v2, ls_v2,
sendrecv_v2):

    STAT path        -> STAT mode size mtime           (lstat; all zero when it fails)
    LIST dir         -> DENT mode size mtime namelen name ..., then DONE and zeros
    SEND path,mode   <- DATA len bytes ..., DONE mtime  -> OKAY 0 | FAIL len message
    RECV path        -> DATA len bytes ..., DONE 0      | FAIL len message
    QUIT             ends the service

Files are read and written by this (root) process on the device root's behalf. Without --root the
shell user's view is approximated by a permission check on owner and mode bits, and files it
creates are chowned to it. The host's own directories bound into the device (device_root.py) are
read-only here, as /system is on a phone.

Run on the stream's service thread; no state outlives one stream.
"""
import os
import stat
import struct
import tempfile

from .device_root import SHELL_UID, DeviceRoot
from .transport import Stream

SYNC_DATA_MAX = 64 * 1024
_PATH_MAX = 1024
_REQUEST = struct.Struct("<4sI")
_STAT = struct.Struct("<4sIII")
_DENT = struct.Struct("<4sIIII")


class SyncFailure(Exception):
    """A request that fails with a message for the host (FAIL)."""


class SyncProtocolError(Exception):
    """The host broke the protocol: the stream is closed."""


def _fail(stream: Stream, message: str) -> None:
    data = message.encode()
    stream.write(_REQUEST.pack(b"FAIL", len(data)) + data)


class SyncSession:
    def __init__(self, device: DeviceRoot, stream: Stream):
        self._device = device
        self._stream = stream

    def run(self) -> None:
        while True:
            request, length = _REQUEST.unpack(self._stream.read_exact(_REQUEST.size))
            if request == b"QUIT":
                return
            if length > _PATH_MAX:
                _fail(self._stream, f"path too long: {length} bytes")
                return
            path = self._stream.read_exact(length).decode(errors="surrogateescape")
            handler = {b"STAT": self._stat, b"LIST": self._list, b"SEND": self._send,
                       b"RECV": self._recv}.get(request)
            if handler is None:
                _fail(self._stream, f"unknown sync request {request!r}")
                return
            handler(path)

    # Permissions ------------------------------------------------------------------------------
    def _may(self, st: os.stat_result, owner_bit: int, other_bit: int) -> bool:
        if self._device.as_root:
            return True
        return bool(st.st_mode & other_bit or (st.st_uid == SHELL_UID and st.st_mode & owner_bit))

    def _check_writable_dir(self, device_dir: str) -> None:
        host = self._device.host_path(device_dir)
        read_only = [self._device.path / "system"]  # mounted read-only, as on a phone
        if not str(host).startswith(str(self._device.path)) or any(
                host == d or d in host.parents for d in read_only):
            raise SyncFailure(f"{device_dir}: Read-only file system")
        # The nearest existing ancestor decides whether missing directories may be made.
        while not host.exists():
            host = host.parent
        if not self._may(host.stat(), stat.S_IWUSR, stat.S_IWOTH):
            raise SyncFailure(f"{device_dir}: Permission denied")

    # Requests ---------------------------------------------------------------------------------
    def _stat(self, path: str) -> None:
        try:
            st = os.lstat(self._device.host_path(path))
            answer = _STAT.pack(b"STAT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime))
        except OSError:
            answer = _STAT.pack(b"STAT", 0, 0, 0)
        self._stream.write(answer)

    def _list(self, path: str) -> None:
        host = self._device.host_path(path)
        entries = []
        try:
            if self._may(host.stat(), stat.S_IRUSR, stat.S_IROTH):
                entries = [".", ".."] + sorted(os.listdir(host))
        except OSError:
            pass
        for name in entries:
            try:
                st = os.lstat(host / name)
            except OSError:
                continue
            encoded = name.encode(errors="surrogateescape")
            self._stream.write(_DENT.pack(b"DENT", st.st_mode, st.st_size & 0xFFFFFFFF,
                                          int(st.st_mtime), len(encoded)) + encoded)
        self._stream.write(_DENT.pack(b"DONE", 0, 0, 0, 0))

    def _receive_data(self, out) -> int:
        """Reads DATA chunks into `out` (None: discard) until DONE; returns DONE's mtime."""
        while True:
            request, value = _REQUEST.unpack(self._stream.read_exact(_REQUEST.size))
            if request == b"DONE":
                return value
            if request != b"DATA" or value > SYNC_DATA_MAX:
                raise SyncProtocolError(f"bad SEND chunk {request!r} of {value} bytes")
            data = self._stream.read_exact(value)
            if out is not None:
                out.write(data)

    def _send(self, spec: str) -> None:
        path, _, mode_text = spec.rpartition(",")
        received = False
        try:
            mode = int(mode_text)
            if not path.startswith("/"):
                raise SyncFailure(f"{path}: path must be absolute")
            self._check_writable_dir(os.path.dirname(path))
            host = self._device.host_path(path)
            self._make_parents(host.parent)
            # A temporary file renamed over the target: a running program keeps its old copy
            # (writing in place would fail with ETXTBSY, or change code under it).
            fd, tmp = tempfile.mkstemp(dir=host.parent, prefix=f".{host.name}.")
            try:
                with os.fdopen(fd, "wb") as out:
                    mtime = self._receive_data(out)
                    received = True
                if stat.S_ISLNK(mode):
                    target = open(tmp, "rb").read().decode(errors="surrogateescape")
                    os.unlink(tmp)
                    tmp = tempfile.mktemp(dir=host.parent, prefix=f".{host.name}.")
                    os.symlink(target, tmp)
                else:
                    os.chmod(tmp, stat.S_IMODE(mode))
                    os.utime(tmp, (mtime, mtime))
                if not self._device.as_root:
                    os.lchown(tmp, SHELL_UID, SHELL_UID)
                os.replace(tmp, host)
            except BaseException:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                raise
        except (SyncFailure, ValueError, OSError) as e:
            message = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            if not received:
                self._receive_data(None)  # the host sends all its data before reading an answer
            _fail(self._stream, f"{path}: {message}" if isinstance(e, OSError) else message)
            return
        self._stream.write(_REQUEST.pack(b"OKAY", 0))

    def _make_parents(self, directory) -> None:
        """Missing directories, owned by whom adbd runs as (the shell user, or root)."""
        if directory.is_dir():
            return
        self._make_parents(directory.parent)
        directory.mkdir(mode=0o775)
        if not self._device.as_root:
            os.lchown(directory, SHELL_UID, SHELL_UID)

    def _recv(self, path: str) -> None:
        host = self._device.host_path(path)
        try:
            if not self._may(host.stat(), stat.S_IRUSR, stat.S_IROTH):
                raise SyncFailure(f"{path}: Permission denied")
            with open(host, "rb") as f:
                while data := f.read(SYNC_DATA_MAX):
                    self._stream.write(_REQUEST.pack(b"DATA", len(data)) + data)
        except (SyncFailure, OSError) as e:
            _fail(self._stream, f"{path}: {e.strerror}" if isinstance(e, OSError) else str(e))
            return
        self._stream.write(_REQUEST.pack(b"DONE", 0))


def serve(device: DeviceRoot, stream: Stream, rest: str) -> None:
    try:
        SyncSession(device, stream).run()
    except SyncProtocolError:
        pass  # closing the stream is the answer
