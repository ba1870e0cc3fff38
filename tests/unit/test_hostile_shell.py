"""A shell command is bounded by what was asked for (issue 53): a phone may send no more output
than the command can print, nor take longer than its deadline for the whole command, however it
paces what it sends; either ends the command with one line. The adb device is real down to its
shell reader; only the phone, at the far end of a socket, is faked."""
import socket
import struct
import threading
import time
import tracemalloc
import types

import adbutils
import pytest

from droidheap.device import adb_processes, adb_sync
from droidheap.device.adb import AdbDevice
from droidheap.device.adb_processes import AdbDaemon
from droidheap.device.adb_sync import SyncClient
from droidheap.errors import DroidheapError

_HEADER = struct.Struct("<BI")
_STDOUT, _STDERR, _EXIT = 1, 2, 3
MiB = 1 << 20


def packet(packet_id: int, data: bytes) -> bytes:
    return _HEADER.pack(packet_id, len(data)) + data


class _HostEnd:
    """The host's end of one stream to the phone, as adbutils' AdbConnection offers it."""

    def __init__(self, sock: socket.socket):
        self.conn = sock

    def send_command(self, command):
        pass

    def check_okay(self):
        pass

    def send(self, data):
        return self.conn.send(data)

    def read_exact(self, size):
        data = b""
        while len(data) < size:
            try:
                chunk = self.conn.recv(size - len(data))
            except socket.timeout:
                raise adbutils.AdbTimeout("adb read timeout") from None
            if not chunk:
                raise EOFError(f"Expected {size} bytes, got {len(data)}")
            data += chunk
        return data

    def close(self):
        self.conn.close()


class FakePhone(adbutils.AdbDevice):
    """A phone whose every shell stream is answered by `serve(socket)`, on a thread of its own;
    `sent` counts the bytes it got out."""

    def __init__(self, serve):
        super().__init__(client=None, serial="hostile")
        self._features = {"shell_v2"}
        self._serve = serve
        self.sent = 0

    def open_transport(self, command=None, timeout=None):
        host, phone = socket.socketpair()
        host.settimeout(timeout)
        threading.Thread(target=self._answer, args=(phone,), daemon=True).start()
        return _HostEnd(host)

    def _answer(self, sock):
        try:
            self._serve(sock, self)
        except OSError:
            pass  # the host has gone: what a phone sees when droidheap gives up on it
        finally:
            sock.close()

    def send(self, sock, data: bytes) -> None:
        sock.sendall(data)
        self.sent += len(data)


def flood(total: int):
    """Output until `total` bytes have gone, then exit 0."""
    def serve(sock, phone):
        chunk = packet(_STDOUT, bytes(64 * 1024))
        while phone.sent < total:
            phone.send(sock, chunk)
        phone.send(sock, packet(_EXIT, b"\0"))
    return serve


def trickle(pace_s: float, for_s: float):
    """A byte every `pace_s`, well within any read's timeout, for `for_s`; then exit 0."""
    def serve(sock, phone):
        end = time.monotonic() + for_s
        while time.monotonic() < end:
            phone.send(sock, packet(_STDOUT, b"x"))
            time.sleep(pace_s)
        phone.send(sock, packet(_EXIT, b"\0"))
    return serve


def _device(phone) -> AdbDevice:
    device = object.__new__(AdbDevice)  # no adb server: only its shell is used
    device.adb = phone
    device.serial = "hostile"
    return device


def test_an_honest_command_gives_its_output_and_exit_code():
    def serve(sock, phone):
        phone.send(sock, packet(_STDOUT, b"out\n") + packet(_STDERR, b"err\n")
                   + packet(_EXIT, b"\x2a"))
    result = _device(FakePhone(serve)).run_script("echo")
    assert (result.exit_code, result.stdout, result.stderr) == (42, "out\n", "err\n")


def test_output_past_what_the_command_can_print_ends_it_and_is_never_kept():
    phone = FakePhone(flood(64 * MiB))
    tracemalloc.start()
    try:
        with pytest.raises(DroidheapError, match=r"^adb shell on hostile failed \(getprop; .*\): "
                                                 r"the device sent more than the 4194304 bytes "
                                                 r"this command can print$"):
            _device(phone)._read_facts()  # getprop's, as every device is opened
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB, peak
    time.sleep(0.1)
    assert phone.sent < 16 * MiB  # the host stopped reading: the phone could not go on


def test_a_packet_claiming_more_than_the_command_can_print_is_refused_unread():
    def serve(sock, phone):
        phone.send(sock, _HEADER.pack(_STDOUT, 0xffffffff) + bytes(64 * 1024))
    with pytest.raises(DroidheapError, match="the device sent more than the 1048576 bytes"):
        _device(FakePhone(serve)).run(["id", "-u"])


def test_a_trickle_ends_at_the_commands_deadline_not_a_reads():
    phone = FakePhone(trickle(pace_s=0.05, for_s=3.0))
    started = time.monotonic()
    with pytest.raises(DroidheapError, match=r"^adb shell on hostile failed \(getprop\): the "
                                             r"device did not answer in time \(the command took "
                                             r"more than 0.5 s\)$"):
        _device(phone).run_script("getprop", timeout_s=0.5)
    assert time.monotonic() - started < 1.5


def test_a_range_read_takes_no_more_than_the_blocks_asked_for():
    phone = FakePhone(flood(16 * MiB))
    with pytest.raises(DroidheapError, match=r"^cannot read /data/app/base.apk on hostile: the "
                                             r"device sent more than the \d+ bytes"):
        _device(phone).read_range("/data/app/base.apk", 10, 100)


def test_a_range_read_gives_the_bytes_asked_for():
    def serve(sock, phone):
        phone.send(sock, packet(_STDOUT, bytes(range(256)) * 32) + packet(_EXIT, b"\0"))
    assert _device(FakePhone(serve)).read_range("/x", 4100, 5) == bytes(range(4, 9))


def test_a_daemon_that_outgrows_its_log_is_cut_off(monkeypatch):
    monkeypatch.setattr(adb_processes, "DAEMON_LOG_MAX_BYTES", MiB, raising=False)
    phone = FakePhone(flood(64 * MiB))
    daemon = AdbDaemon(types.SimpleNamespace(adb=phone, serial="hostile"), "droidheapd")
    assert daemon.wait(10) == 255
    log = daemon.log()
    assert len(log) < 2 * MiB
    assert log.endswith(f"droidheapd's output on hostile passed {MiB} bytes: droidheap closed "
                        "its stream\n")


def test_a_stat_trickled_a_byte_at_a_time_ends_at_its_deadline(monkeypatch):
    """A sync call has a deadline for the whole call too: a phone that answers a stat a byte at
    a time, each well within a read's timeout, is given up."""
    monkeypatch.setattr(adb_sync, "_TIMEOUT_S", 1.0)

    def serve(sock, phone):
        sock.recv(4096)  # the request
        for byte in b"STAT" + bytes(12):
            phone.send(sock, bytes([byte]))
            time.sleep(0.2)

    began = time.monotonic()
    with pytest.raises(DroidheapError, match="did not answer in time"):
        SyncClient(FakePhone(serve)).stat("/data/local/tmp/x")
    assert time.monotonic() - began < 2


def test_a_push_the_phone_never_takes_in_ends_at_its_deadline(monkeypatch, tmp_path):
    """A push must go at a pull's least pace: a phone that reads nothing of it is given up."""
    monkeypatch.setattr(adb_sync, "PULL_RATE_GRACE_S", 1.0)
    monkeypatch.setattr(adb_sync, "MIN_PULL_RATE_BYTES_S", 1 << 30)  # 4 MiB: 1 s in all
    local = tmp_path / "library.so"
    local.write_bytes(bytes(4 * MiB))

    def serve(sock, phone):
        time.sleep(5)  # never reads: the host's sends fill the socket and wait

    began = time.monotonic()
    with pytest.raises(DroidheapError, match="did not answer in time"):
        SyncClient(FakePhone(serve)).push(local, "/data/local/tmp/library.so")
    assert time.monotonic() - began < 3
