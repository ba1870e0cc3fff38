"""Which /proc/PID/maps lines root's --all takes for bionic's libc (adb_routes.py): where a
device has it, and no libc.so elsewhere, such as a qemu-user process's mapping of an Android
userland unpacked on the host, which a test device sharing the host's /proc sees (a native test
on bionic killed by the profiling signal, with nothing said)."""
import re
import subprocess

import pytest

from droidheap.device.adb_routes import _BIONIC_LIBC_IN_MAPS

PREFIX = "7f0000000000-7f0000001000 r--p 00000000 fe:00 1234                       "
TAKEN = ["/apex/com.android.runtime/lib64/bionic/libc.so",
         "/apex/com.android.runtime/lib/bionic/libc.so",
         "/system/lib64/libc.so", "/system/lib/libc.so", "/system/lib64/bootstrap/libc.so",
         "/system/apex/com.android.runtime.release/lib64/bionic/libc.so"]
NOT_TAKEN = ["/tmp/pytest-of-root/pytest-3/popen-gw1/android-rootfs0/system/apex/"
             "com.android.runtime.release/lib64/bionic/libc.so",
             "/tmp/droidheap-device-x/system/lib64/libc.so",
             "/usr/lib/x86_64-linux-gnu/libc.so.6", "/system/lib64/libc.so.bak",
             "/system/lib64/libcrypto_libc.so"]


@pytest.mark.parametrize("path, taken", [*((p, True) for p in TAKEN),
                                         *((p, False) for p in NOT_TAKEN)])
def test_bionic_libc_where_a_device_has_it(path, taken):
    line = PREFIX + path
    assert bool(re.search(_BIONIC_LIBC_IN_MAPS, line)) == taken
    # As the device's grep -E reads it.
    grep = subprocess.run(["grep", "-qE", _BIONIC_LIBC_IN_MAPS], input=line + "\n", text=True)
    assert (grep.returncode == 0) == taken
