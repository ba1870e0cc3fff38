"""Whole profiling sessions on the Android test device (Android 10's own userland under
qemu-user) through a real adb server: a program built as the NDK builds an app's code, loaded by
bionic's own linker, whose malloc dispatch and heapprofd hooks load droidheap's client; the site
bytes exact, and the platform's heapprofd, clients and properties as they were afterwards."""
import pytest

from tests.android import compile_android_program
from tests.e2e.test_profile import assert_sites, single_process
from tests.e2e.trace_check import assert_trace_processor_agrees, totals_by_leaf_function

from .conftest import DEVICE_PROGRAM, ROOT, AdbCli


@pytest.fixture(scope="module")
def android_program(tmp_path_factory):
    return compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                   tmp_path_factory.mktemp("android-programs") / "alloc_sites",
                                   "arm64-v8a")


@pytest.fixture
def android_cli(adb_server, android_root_device, android_program):
    adb_server.adb("-s", android_root_device.serial, "push", str(android_program), DEVICE_PROGRAM)
    return AdbCli(adb_server, android_root_device.serial)


def test_root_mode_spawn_through_bionics_heapprofd_hooks_is_exact(android_cli, android_program,
                                                                  tmp_path):
    out = tmp_path / "out"
    result = android_cli.run("-o", out, "-i", "1", "--", DEVICE_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert "(A37, arm64-v8a, SDK 29, userdebug), root mode" in result.stderr
    assert "done" in result.stdout
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", android_program)), 1)
    # Pulled from the device and named: the program as bionic's linker loaded it (lld's layout).
    assert "site_leak_malloc (alloc_sites.c:" in result.stdout, result.stdout
    assert_trace_processor_agrees(out, android_program)
    # heapprofd running again (restarted by init), both clients unmounted, properties cleared.
    android_cli.assert_left_as_it_was()
