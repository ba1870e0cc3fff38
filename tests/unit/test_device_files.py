"""The device's files pulled to symbolize with are kept per build id: a second run takes them
from the cache, each output directory still gets its own copies. The cache is keyed by the build
id the trace asked for and holds only files that have it: a phone that serves another file (one
changed since the trace, or a hostile phone's) seeds nothing later sessions use."""
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


def test_a_file_whose_build_id_differs_from_the_traces_is_not_cached(program, tmp_path):
    device = FakeDevice({LIB: program.path})
    cache = tmp_path / "cache"
    asked = "ab" * 20
    fetch_device_files(device, [(LIB, asked)], tmp_path / "out", cache)
    assert (tmp_path / "out" / LIB.lstrip("/")).is_file()  # this output still has it
    assert not (cache / asked).exists() and not (cache / program.build_id).exists()
    # A later session whose trace asks for the build id that file claims asks its own device.
    fetch_device_files(device, [(LIB, program.build_id)], tmp_path / "again", cache)
    assert device.asked == [[LIB], [LIB]]


def test_a_cached_file_whose_build_id_differs_from_its_key_is_ignored(program, tmp_path):
    cache = tmp_path / "cache"
    asked = "ab" * 20
    seeded = cache / asked / "libfoo.so"
    seeded.parent.mkdir(parents=True)
    shutil.copyfile(program.path, seeded)  # build id: program.build_id, not `asked`
    device = FakeDevice({})
    assert fetch_device_files(device, [(LIB, asked)], tmp_path / "out", cache) \
        == tmp_path / "out"
    assert device.asked == [[LIB]]
    assert not (tmp_path / "out" / LIB.lstrip("/")).exists()


def test_a_build_id_that_is_not_hex_reads_nothing_outside_the_cache(program, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "libfoo.so"
    elsewhere.parent.mkdir()
    shutil.copyfile(program.path, elsewhere)
    (tmp_path / "cache").mkdir()
    device = FakeDevice({})
    fetch_device_files(device, [(LIB, "../elsewhere")], tmp_path / "out", tmp_path / "cache")
    assert not (tmp_path / "out" / LIB.lstrip("/")).exists()


def test_nothing_for_a_device_whose_files_are_this_machines(tmp_path):
    assert fetch_device_files(LocalDevice(), [(LIB, "ab" * 20)], tmp_path / "out",
                              tmp_path / "cache") is None
