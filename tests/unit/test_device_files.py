"""The device's files pulled to symbolize with are kept per build id: a second run takes them
from the cache, each output directory still gets its own copies, and a file that changed on the
device since the trace is cached under the build id it has."""
import pathlib
import shutil

from droidheap.device_files import fetch_device_files

LIB = "/system/lib64/libfoo.so"


class FakeDevice:
    """Serves `files` ({device path: host file}) as an adb device's fetch_files does."""

    def __init__(self, files):
        self.files = files
        self.asked = []

    def fetch_files(self, remotes, local_dir):
        self.asked.append(list(remotes))
        for remote in remotes:
            if remote in self.files:
                target = local_dir / remote.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.files[remote], target)
        return local_dir


class LocalDevice:
    def fetch_files(self, remotes, local_dir):
        return None


def test_a_file_is_pulled_once_per_build_id(program, tmp_path):
    device = FakeDevice({LIB: program.path})
    cache = tmp_path / "cache"
    modules = [(LIB, program.build_id)]
    first = fetch_device_files(device, modules, tmp_path / "one", cache)
    assert first == tmp_path / "one" and (first / LIB.lstrip("/")).is_file()
    assert (cache / program.build_id / "libfoo.so").is_file()
    second = fetch_device_files(device, modules, tmp_path / "two", cache)
    assert device.asked == [[LIB]]  # the second run asked the device nothing
    assert (second / LIB.lstrip("/")).read_bytes() == pathlib.Path(program.path).read_bytes()


def test_a_changed_device_file_is_cached_under_its_own_build_id(program, tmp_path):
    device = FakeDevice({LIB: program.path})
    cache = tmp_path / "cache"
    stale = "ab" * 20
    fetch_device_files(device, [(LIB, stale)], tmp_path / "out", cache)
    assert not (cache / stale).exists() and (cache / program.build_id / "libfoo.so").is_file()
    fetch_device_files(device, [(LIB, stale)], tmp_path / "again", cache)
    assert device.asked == [[LIB], [LIB]]


def test_nothing_for_a_device_whose_files_are_this_machines(tmp_path):
    assert fetch_device_files(LocalDevice(), [(LIB, "ab" * 20)], tmp_path / "out",
                              tmp_path / "cache") is None
