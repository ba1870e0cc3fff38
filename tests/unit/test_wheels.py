"""What a phone owner without a compiler installs: the wheels scripts/build_wheel makes (built and
installed once per run, tests/wheels.py), each carrying the Android binaries of every ABI built
here. The Linux wheel adds the Linux emulator's binaries; the wheel for any host OS
(py3-none-any) has Android's alone. tests/adb/test_bare_wheel.py profiles a phone with each."""
import zipfile

from tests.wheels import assert_android_binaries, installed_wheel

# Made early by the worker that takes this module, while the device tests' worker runs its
# others (tests/conftest.py).
MADE_EARLY = True


def test_the_linux_wheel_carries_androids_binaries_and_the_emulators(tmp_path_factory):
    wheel = installed_wheel("linux", tmp_path_factory).wheel
    with zipfile.ZipFile(wheel) as archive:
        assert_android_binaries(archive)
        assert archive.read("droidheap/bin/linux/x86_64/droidheapd").startswith(b"\x7fELF")


def test_the_any_os_wheel_carries_androids_binaries_alone(tmp_path_factory):
    wheel = installed_wheel("any", tmp_path_factory).wheel
    assert wheel.name.endswith("-py3-none-any.whl"), wheel
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert_android_binaries(archive)
        assert not [name for name in names if name.startswith("droidheap/bin/linux/")]
        wheel_file = next(name for name in names if name.endswith(".dist-info/WHEEL"))
        assert "Tag: py3-none-any\n" in archive.read(wheel_file).decode()
