"""The roots of their own that --local sessions take beside another (device/local.py): one whose
session is gone is removed by the next, with its link; one still held, or with a trace left, is
kept; a link to anything else is dropped, what it points to left alone."""
import fcntl
import pathlib
import shutil
import tempfile

from droidheap.device import local


def _own_root(runs, trace=False):
    root = pathlib.Path(tempfile.mkdtemp(prefix="droidheap-device-")).resolve()
    (root / "session.lock").touch()
    if trace:
        (root / "data" / "misc" / "perfetto-traces").mkdir(parents=True)
        (root / "data" / "misc" / "perfetto-traces" / "droidheap-1.trace").write_bytes(b"x")
    (runs / root.name).symlink_to(root)
    return root


def test_abandoned_roots_go_and_the_rest_stay(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    gone, traced, held = _own_root(runs), _own_root(runs, trace=True), _own_root(runs)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runs / "planted").symlink_to(elsewhere)
    with open(held / "session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        local._remove_abandoned(runs)
    assert not gone.exists() and traced.is_dir() and held.is_dir() and elsewhere.is_dir()
    assert sorted(p.name for p in runs.iterdir()) == sorted([traced.name, held.name])
    for root in (traced, held):
        shutil.rmtree(root)
