"""Paths a phone or a trace names are data: a mapping path that climbs out of OUT/device-files, or
that a symlink planted in it leads elsewhere, is refused with a warning naming it, and nothing
outside OUT is written. The adb device is real down to its sync client; only the wire is faked,
served by a phone that answers every RECV with the same bytes."""
import shutil
import struct

import pytest

from droidheap.convert import convert_trace
from droidheap.device.adb import AdbDevice
from droidheap.device.adb_sync import SyncClient
from droidheap.device_files import fetch_device_files
from fixtures_trace import FakeMapping, TraceBuilder, two_process_trace

_WORD = struct.Struct("<4sI")
PAYLOAD = b"written by the phone"
VICTIM_TEXT = "the user's own file\n"


class _HostileStream:
    """One sync stream of a phone that serves PAYLOAD for whatever path it is asked."""

    def __init__(self):
        self.conn = self
        self._answer = b""

    def send_command(self, command):
        pass

    def check_okay(self):
        pass

    def sendall(self, data):
        request, _ = _WORD.unpack(data[:_WORD.size])
        if request == b"RECV":
            self._answer = (_WORD.pack(b"DATA", len(PAYLOAD)) + PAYLOAD
                            + _WORD.pack(b"DONE", 0))
        elif request == b"STAT":
            self._answer = b"STAT" + bytes(12)  # mode 0: it says nothing of the file

    def read_exact(self, length):
        chunk, self._answer = self._answer[:length], self._answer[length:]
        return chunk

    def recv(self, size):  # what the sync client reads its answers with, by a deadline
        return self.read_exact(size)

    def settimeout(self, timeout):
        pass

    def close(self):
        pass


class HostilePhone:
    def open_transport(self, timeout=None):
        return _HostileStream()


def hostile_adb_device() -> AdbDevice:
    device = object.__new__(AdbDevice)  # no adb server: only its file transfer is used
    device._sync = SyncClient(HostilePhone())
    return device


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "home" / "victim"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def climbing(target) -> str:
    return "/x" + "/.." * 40 + str(target)


def test_adb_fetch_files_does_not_write_outside_its_directory(tmp_path, victim):
    out = tmp_path / "out" / "device-files"
    hostile_adb_device().fetch_files([climbing(victim), "/system/lib64/libfoo.so"], out)
    assert victim.read_text() == VICTIM_TEXT
    assert (out / "system/lib64/libfoo.so").read_bytes() == PAYLOAD  # an honest path still is


@pytest.mark.parametrize("cached", [False, True])
def test_device_files_do_not_climb_out_of_the_output(tmp_path, victim, cached):
    cache = tmp_path / "cache"
    if cached:
        entry = cache / ("ab" * 20) / "victim"
        entry.parent.mkdir(parents=True)
        entry.write_bytes(PAYLOAD)
    fetch_device_files(hostile_adb_device(), [(climbing(victim), "ab" * 20)],
                       tmp_path / "out" / "device-files", cache)
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("cached", [False, True])
def test_a_directory_symlink_planted_in_device_files_is_not_followed(tmp_path, cached):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out" / "device-files"
    out.mkdir(parents=True)
    (out / "system").symlink_to(elsewhere)
    cache = tmp_path / "cache"
    if cached:
        entry = cache / ("ab" * 20) / "libfoo.so"
        entry.parent.mkdir(parents=True)
        entry.write_bytes(PAYLOAD)
    fetch_device_files(hostile_adb_device(), [("/system/lib64/libfoo.so", "ab" * 20)], out, cache)
    assert list(elsewhere.iterdir()) == []


def test_a_file_symlink_planted_in_device_files_is_not_written_through(tmp_path, victim):
    out = tmp_path / "out" / "device-files"
    (out / "system" / "lib64").mkdir(parents=True)
    (out / "system" / "lib64" / "libfoo.so").symlink_to(victim)
    hostile_adb_device().fetch_files(["/system/lib64/libfoo.so"], out)
    assert victim.read_text() == VICTIM_TEXT


def test_a_climbing_mapping_path_in_a_trace_is_refused_with_a_warning(tmp_path, victim):
    path = climbing(victim)
    mapping = FakeMapping(path, bytes.fromhex("ab" * 20))
    b = TraceBuilder().clock_snapshot().process(7, "app")
    stack = b.callstack([(mapping, 0x1000)])
    b.dump({7: [(stack, 4096, 0, 1, 0)]})
    raw = tmp_path / "raw-trace"
    raw.write_bytes(b.to_bytes())
    out = tmp_path / "out"
    result = convert_trace(raw, out, fetch_files=lambda modules, _: fetch_device_files(
        hostile_adb_device(), modules, out / "device-files", tmp_path / "cache"))
    assert victim.read_text() == VICTIM_TEXT
    assert any(path in w and "refused" in w for w in result.warnings), result.warnings


def test_a_symlink_in_device_files_does_not_lead_the_symbolizer_out(program, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "bin"
    elsewhere.mkdir(parents=True)
    shutil.copyfile(program.path, elsewhere / "prog")
    device_files = tmp_path / "out" / "device-files"
    device_files.mkdir(parents=True)
    (device_files / "system").symlink_to(elsewhere.parent)
    mapping = FakeMapping("/system/bin/prog", bytes.fromhex(program.build_id))
    b = TraceBuilder().clock_snapshot().process(7, "prog")
    stack = b.callstack([(mapping, program.return_addresses["leaf_alloc"])])
    b.dump({7: [(stack, 4096, 0, 1, 0)]})
    raw = tmp_path / "raw-trace"
    raw.write_bytes(b.to_bytes())
    result = convert_trace(raw, tmp_path / "out", fetch_files=lambda modules, _: device_files)
    assert any("/system/bin/prog" in w and "refused" in w for w in result.warnings), \
        result.warnings
    assert "middle" not in result.summary_text


def test_the_symbolizer_refuses_a_climbing_path(program, tmp_path):
    from droidheap.symbolizer import Symbolizer
    path = climbing(program.path)
    symbolizer = Symbolizer([tmp_path])
    module = symbolizer.symbolize(path, program.build_id, list(program.return_addresses.values()))
    assert module.elf is None and not module.lines
    assert any(path in w and "refused" in w for w in symbolizer.warnings), symbolizer.warnings


class _LeftoverDevice:
    """A phone whose trace directory lists what it likes."""
    files_are_this_machines = False

    def __init__(self, listed):
        self.listed = listed
        self.pulled = []

    def lock(self):
        return []

    def unlock(self):
        pass

    def describe(self):
        return "a hostile phone"

    def leftover_traces(self):
        return self.listed

    def pull(self, remote, local):
        self.pulled.append(remote)
        local.write_bytes(two_process_trace().to_bytes())

    def remove(self, remote):
        pass

    def fetch_files(self, remotes, local_dir):
        return None


def test_pull_refuses_leftover_trace_names_that_are_not_its_own(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from droidheap.cli import cli
    device = _LeftoverDevice(["/t/droidheap-1.trace", "/t/droidheap-1.trace", "/t/..",
                              "/t/droidheap-2.trace/.", "/t/droidheap-3.trace"])
    monkeypatch.setattr("droidheap.commands.pull.open_device", lambda obj: device)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["pull", "-o", str(out)])
    assert result.exception is None, result.output
    assert device.pulled == ["/t/droidheap-1.trace", "/t/droidheap-3.trace"]
    assert sorted(p.name for p in out.iterdir()) == ["droidheap-1", "droidheap-3"]
    for refused in ("/t/..", "/t/droidheap-2.trace/."):
        assert "refused" in result.output and refused in result.output
