"""Outputs are new files renamed into place: a symlink planted at an output's name (or at the
temporary name it was written under), in a directory someone sent, is replaced, and what it
points to is left alone."""
import os
import pathlib

import pytest

from droidheap.device.adb_sync import SyncClient
from droidheap.device.local import LocalDevice
from droidheap.session import DAEMON_LOG, ProfileOptions, Session
from droidheap.symbol_cache import SymbolCache
from fixtures_trace import two_process_trace
from test_cli_errors import run_cli
from test_hostile_paths import PAYLOAD, VICTIM_TEXT, HostilePhone

PPROF = "heap_dump.0.100.libc.malloc.pb.gz"


def plant(directory: pathlib.Path, name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """A symlink `directory/name` to a victim file of its own; returns the victim."""
    victim = tmp_path / f"victim-of-{name}"
    victim.write_text(VICTIM_TEXT)
    (directory / name).symlink_to(victim)
    return victim


@pytest.mark.parametrize("name", ["symbolized-trace.tmp", "symbolized-trace", "report.html",
                                  PPROF])
def test_symbolize_replaces_a_symlink_planted_in_the_trace_directory(tmp_path, name):
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "raw-trace").write_bytes(two_process_trace().to_bytes())
    victim = plant(sent, name, tmp_path)
    result = run_cli(["symbolize", str(sent / "raw-trace")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == VICTIM_TEXT
    for output in ("symbolized-trace", "report.html", PPROF):
        assert (sent / output).is_file() and not (sent / output).is_symlink()


def test_a_pulled_trace_replaces_a_symlink_at_its_name(tmp_path):
    victim = plant(tmp_path, "raw-trace", tmp_path)
    SyncClient(HostilePhone()).pull("/data/misc/perfetto-traces/x.trace", tmp_path / "raw-trace",
                                    1 << 20)
    assert victim.read_text() == VICTIM_TEXT
    assert (tmp_path / "raw-trace").read_bytes() == PAYLOAD


def test_the_emulated_device_pull_replaces_a_symlink_at_its_name(tmp_path):
    device = LocalDevice(root=tmp_path / "device")
    remote = pathlib.Path(device.layout.trace_dir) / "droidheap-1.trace"
    remote.write_bytes(PAYLOAD)
    victim = plant(tmp_path, "raw-trace", tmp_path)
    device.pull(str(remote), tmp_path / "raw-trace")
    assert victim.read_text() == VICTIM_TEXT
    assert (tmp_path / "raw-trace").read_bytes() == PAYLOAD


class _ExitedDaemon:
    def poll(self):
        return 0

    def log(self):
        return "droidheapd: listening\n"

    def close(self):
        pass


class _Device:
    class layout:
        trace_dir = "/data/misc/perfetto-traces"


def test_the_daemon_log_replaces_a_symlink_at_its_name(tmp_path):
    victim = plant(tmp_path, DAEMON_LOG, tmp_path)
    session = Session(_Device(), ProfileOptions())
    session.daemon = _ExitedDaemon()
    session.close(tmp_path)
    assert victim.read_text() == VICTIM_TEXT
    assert (tmp_path / DAEMON_LOG).read_text() == "droidheapd: listening\n"


def test_the_symbol_cache_does_not_write_through_a_planted_temporary_name(tmp_path):
    build_id = "ab" * 20
    victim = plant(tmp_path, f"{build_id}.json.{os.getpid()}.tmp", tmp_path)
    SymbolCache(tmp_path).store(build_id, [], {0x10: [("f", "f.c", 1)]})
    assert victim.read_text() == VICTIM_TEXT
    assert SymbolCache(tmp_path).load(build_id, []) == {0x10: [("f", "f.c", 1)]}
