"""Root's copies of droidheap's files (droidheap/device/adb_root_dir.py): every file copied and
checked in one round trip, a file the shell user swapped refused by name, and nothing after the
first failure copied. Run by this machine's sh, as root, in place of a rooted device's
(tests/adb/test_trust.py swaps files on the test device)."""
import os
import pathlib
import subprocess

import pytest

from droidheap.device import adb_root_dir
from droidheap.device.adb import ShellResult
from droidheap.device.adb_root_dir import Copy, RootDirectory
from droidheap.errors import DroidheapError

# The copies are checked to be root's: as another user every check would refuse them.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's copies are checked as root's")


class RootShell:
    """The part of an AdbDevice the copies use: each script run by /bin/sh, counted."""

    serial = "sh"

    def __init__(self):
        self.scripts = 0

    def run_privileged(self, script: str) -> ShellResult:
        self.scripts += 1
        done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                              timeout=60)
        return ShellResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def copies(tmp_path, monkeypatch):
    """Three files pushed (a daemon, a client, a 32-bit client in a subdirectory), and root's
    directory, empty."""
    root = tmp_path / "root dir"
    root.mkdir(mode=0o755)
    monkeypatch.setattr(adb_root_dir, "ROOT_DIR", str(root))
    staged = tmp_path / "staged"
    staged.mkdir()
    made = []
    for number, (relative, data) in enumerate([("droidheapd", b"daemon" * 3000),
                                               ("heapprofd_client.so", b"client"),
                                               ("lib32/heapprofd_client.so", b"c32" * 5000)]):
        local = tmp_path / f"local {number}"
        local.write_bytes(data)
        (staged / local.name).write_bytes(data)
        mode = 0o755 if number == 0 else 0o644
        made.append(Copy(local, str(staged / local.name), relative, mode))
    return made


def test_every_file_is_copied_and_checked_in_one_round_trip(copies):
    device = RootShell()
    copied = RootDirectory(device).install(copies)
    assert device.scripts == 1
    assert list(copied) == [copy.relative for copy in copies]
    for copy in copies:
        target = pathlib.Path(copied[copy.relative])
        assert target == pathlib.Path(adb_root_dir.ROOT_DIR) / copy.relative
        assert target.read_bytes() == copy.local.read_bytes()
        assert target.stat().st_mode & 0o777 == copy.mode
    assert (pathlib.Path(adb_root_dir.ROOT_DIR) / "lib32").stat().st_mode & 0o777 == 0o755


def test_a_swapped_file_is_refused_by_name_and_nothing_after_it_is_copied(copies):
    # The shell user's file, longer than droidheap's: root reads no more than droidheap's size.
    pathlib.Path(copies[1].staged).write_bytes(b"client" + b"evil" * 10000)
    with pytest.raises(DroidheapError, match=f"^{copies[1].staged} on sh is not the "
                                             "heapprofd_client.so droidheap pushed there"):
        RootDirectory(RootShell()).install(copies)
    root = pathlib.Path(adb_root_dir.ROOT_DIR)
    assert sorted(path.name for path in root.iterdir()) == ["droidheapd"]


def test_a_copy_that_fails_is_named(copies):
    os.unlink(copies[2].staged)
    with pytest.raises(DroidheapError, match="^cannot copy lib32/heapprofd_client.so into .* "
                                             "on sh: cannot read "):
        RootDirectory(RootShell()).install(copies)
