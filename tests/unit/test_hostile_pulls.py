"""A pull is bounded (issue 41): a phone says when a file ends, and a hostile one never would. It
may send no more than droidheap takes (or the output's file system has room for, less a reserve)
and no slower than MIN_PULL_RATE_BYTES_S once past the grace period; either ends the pull with
one line, and no partial file is left. The adb device is real down to its sync client; only the
wire is faked."""
import struct

import pytest

from droidheap.device import adb, adb_sync
from droidheap.device.adb import AdbDevice
from droidheap.device.adb_sync import SyncClient
from droidheap.errors import DroidheapError
from test_hostile_paths import _HostileStream

_WORD = struct.Struct("<4sI")
CHUNK = b"x" * 65536


class _EndlessStream(_HostileStream):
    """A sync stream that answers RECV with DATA chunks forever, and STAT with `size`."""

    def __init__(self, size: int, clock: list):
        super().__init__()
        self._size = size
        self._clock = clock  # [seconds, pace]: moved on by `pace` at each chunk
        self._recv = False
        self._stat = b""

    def sendall(self, data):
        request, _ = _WORD.unpack(data[:_WORD.size])
        self._recv = request == b"RECV"
        if request == b"STAT":
            self._stat = b"STAT" + struct.pack("<III", 0o100644, self._size, 0)

    def read_exact(self, length):
        if not self._recv:
            answer, self._stat = self._stat[:length], self._stat[length:]
            return answer
        if length == _WORD.size:
            self._clock[0] += self._clock[1]
            return _WORD.pack(b"DATA", len(CHUNK))
        return CHUNK[:length]


class _EndlessPhone:
    def __init__(self, size: int = 0, pace_s: float = 0.0):
        self.clock = [0.0, pace_s]
        self.size = size

    def open_transport(self, timeout=None):
        return _EndlessStream(self.size, self.clock)


def _device(phone) -> AdbDevice:
    device = object.__new__(AdbDevice)  # no adb server: only its file transfer is used
    device._sync = SyncClient(phone)
    return device


def test_a_file_that_never_ends_is_cut_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(adb, "PULL_MAX_BYTES", 1 << 20)
    local = tmp_path / "raw-trace"
    with pytest.raises(DroidheapError, match=r"^cannot pull /data/x: the device sent more than "
                                             r"1048576 bytes of it$"):
        _device(_EndlessPhone()).pull("/data/x", local)
    assert list(tmp_path.iterdir()) == []  # nothing left, not even the partial file


def test_a_file_larger_than_droidheap_takes_is_refused_before_it_comes(tmp_path, monkeypatch):
    monkeypatch.setattr(adb, "PULL_MAX_BYTES", 1 << 20)
    with pytest.raises(DroidheapError, match=r"it is 2097152 bytes, and droidheap takes at most"):
        _device(_EndlessPhone(size=2 << 20)).pull("/data/x", tmp_path / "raw-trace")


def test_a_file_larger_than_the_disks_room_is_refused(tmp_path, monkeypatch):
    # The whole disk kept free: no room, however much the tests beside this one free meanwhile (a
    # reserve of the free bytes of a moment left a page of room once, beside a CPU hog).
    monkeypatch.setattr(adb, "PULL_DISK_RESERVE_BYTES", adb.shutil.disk_usage(tmp_path).total)
    with pytest.raises(DroidheapError, match=r"it is 1024 bytes, and .* has room for 0 \(keeping"):
        _device(_EndlessPhone(size=1024)).pull("/data/x", tmp_path / "raw-trace")


def test_a_trickle_is_given_up(tmp_path, monkeypatch):
    phone = _EndlessPhone(pace_s=2.0)  # 64 KiB every 2 s: 32 KiB/s
    monkeypatch.setattr(adb_sync.time, "monotonic", lambda: phone.clock[0])
    with pytest.raises(DroidheapError, match=r"^cannot pull /data/x: the device sent \d+ bytes "
                                             r"in \d+ s, too slowly to go on$"):
        _device(phone).pull("/data/x", tmp_path / "raw-trace")
    assert phone.clock[0] <= adb_sync.PULL_RATE_GRACE_S + 4
