"""What droidheap writes on this machine is its user's alone, whatever the umask (issue 41): heap
profiles hold command lines, paths and symbols. Output files are 0600, the directories droidheap
makes for them 0700, and so are its caches' directories (symbols, device files) and the local
device's root (its traces, its properties); its session lock is never opened through a link
planted at its name."""
import os
import pathlib
import stat

import pytest

from droidheap.commands.output import prepare_output
from droidheap.convert import convert_trace
from droidheap.device.local import LocalDevice
from droidheap.device_files import fetch_device_files
from droidheap.errors import DroidheapError
from droidheap.symbol_cache import SymbolCache
from fixtures_trace import two_process_trace
from test_device_files import LIB, FakeDevice


@pytest.fixture
def open_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_outputs_are_their_owners_alone(tmp_path, open_umask):
    out = prepare_output(tmp_path / "new" / "out")
    raw = tmp_path / "raw-trace"
    raw.write_bytes(two_process_trace().to_bytes())
    convert_trace(raw, out)
    assert _mode(out) == 0o700
    files = [path for path in out.rglob("*")]
    assert len(files) >= 4, files
    for path in files:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path


def test_the_caches_are_their_owners_alone(program, tmp_path, open_umask, monkeypatch):
    # A fresh machine's: no cache directory yet, not even XDG's.
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.delenv("DROIDHEAP_CACHE_DIR")
    SymbolCache().store(program.build_id, [], {0x1000: []})
    fetch_device_files(FakeDevice({LIB: program.path}), [(LIB, program.build_id)],
                       tmp_path / "out")
    directories = {path.relative_to(xdg): _mode(path)
                   for path in [xdg, *xdg.rglob("*")] if path.is_dir()}
    assert directories == dict.fromkeys(
        map(pathlib.Path, [".", "droidheap", "droidheap/symbols", "droidheap/device-files",
                           f"droidheap/device-files/{program.build_id}"]), 0o700)


def test_the_local_devices_root_is_its_owners_alone(tmp_path, open_umask):
    assert _mode(LocalDevice(root=tmp_path / "fresh").root) == 0o700
    older = tmp_path / "older"
    older.mkdir(mode=0o755)
    LocalDevice(root=older)
    assert _mode(older) == 0o700


def test_a_link_planted_at_the_session_lock_is_refused_not_followed(tmp_path):
    device = LocalDevice(root=tmp_path / "device")
    victim = tmp_path / "victim"
    victim.write_text("the user's own file\n")
    (device.root / "session.lock").symlink_to(victim)
    with pytest.raises(DroidheapError, match="cannot open the session lock of the emulated device"):
        device.lock()
    assert victim.read_text() == "the user's own file\n"
