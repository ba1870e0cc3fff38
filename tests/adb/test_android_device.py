"""The Android test devices themselves (scripts/test_adbd --android): Android 10's own userland
under qemu-user and Android 11's natively, reached through a real adb server. What droidheap
relies on runs the platform's own code here: bionic's property reads from a real property area,
toybox's getprop, setprop, pidof, ps and killall, init's property service, its services and their
states."""
import re
import tarfile
import time

from .conftest import ONE_ADB_SERVER


def shell(adb_server, device, script: str) -> str:
    result = adb_server.adb("-s", device.serial, "shell", script, check=False)
    return result.stdout + result.stderr


def refused(output: str) -> bool:
    """What toybox's setprop says when init refuses (Android 10: "failed", 11: "Failed")."""
    return "failed to set property" in output.lower()


# The ABIs each device lists: Android 10's runs 32-bit programs too; Android 11's userland was cut
# to 64-bit (no 32-bit bionic), so its device lists only what it runs.
ABILISTS = {"android10": "arm64-v8a,armeabi-v7a,armeabi", "android11": "x86_64"}


@ONE_ADB_SERVER
def test_bionic_reads_the_property_area(adb_server, android_root_device, android_release):
    props = shell(adb_server, android_root_device,
                  "getprop ro.build.version.sdk; getprop ro.product.model; getprop ro.build.type; "
                  "getprop ro.product.cpu.abilist; getprop | wc -l").split()
    assert props[:4] == [str(android_release.sdk), android_release.model,
                         android_release.build_type, ABILISTS[android_release.name]]
    assert int(props[4]) > 60  # build.prop's and what init adds


@ONE_ADB_SERVER
def test_setprop_goes_through_inits_property_service_with_androids_rules(
        adb_server, android_root_device, android_shell_device):
    assert shell(adb_server, android_shell_device,
                 "setprop debug.droidheap.test one && getprop debug.droidheap.test").strip() == "one"
    # The shell user may not set heapprofd's properties; root may; nobody changes a ro. one.
    assert refused(shell(adb_server, android_shell_device, "setprop heapprofd.enable 1"))
    assert shell(adb_server, android_shell_device, "getprop heapprofd.enable").strip() == ""
    assert shell(adb_server, android_root_device,
                 "setprop heapprofd.enable 1 && getprop heapprofd.enable && "
                 "setprop heapprofd.enable ''").strip() == "1"
    assert refused(shell(adb_server, android_root_device, "setprop ro.build.type user"))
    # A changed value is seen by a program that had already read the area (a shell loop).
    out = shell(adb_server, android_root_device,
                "setprop debug.droidheap.seen a; (sleep 1; setprop debug.droidheap.seen bb) & "
                "for i in 1 2 3 4 5 6 7 8 9 10; do getprop debug.droidheap.seen; sleep 0.3; done")
    assert out.split()[0] == "a" and out.split()[-1] == "bb"
    # Left as they were: empty, as unset ones read.
    shell(adb_server, android_root_device, "setprop debug.droidheap.seen ''")
    shell(adb_server, android_shell_device, "setprop debug.droidheap.test ''")


@ONE_ADB_SERVER
def test_init_stops_and_starts_the_platforms_heapprofd(adb_server, android_root_device):
    def state():
        return shell(adb_server, android_root_device,
                     "getprop init.svc.heapprofd; pidof heapprofd || echo none").split()

    running = state()
    assert running[0] == "running" and running[1].isdigit()
    assert shell(adb_server, android_root_device, "ls -l /dev/socket/heapprofd").startswith("srw-rw-rw-")
    shell(adb_server, android_root_device, "stop heapprofd")
    assert state() == ["stopped", "none"]
    shell(adb_server, android_root_device, "start heapprofd")
    deadline = time.monotonic() + 10
    while (now := state())[0] != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert now[0] == "running" and now[1].isdigit() and now[1] != running[1]


@ONE_ADB_SERVER
def test_processes_are_the_devices_own_with_a_phones_command_lines(adb_server,
                                                                    android_root_device):
    out = shell(adb_server, android_root_device,
                # (natively, the child may not have exec'd sleep yet when $! is known)
                "sleep 20 & p=$!; until pidof sleep >/dev/null; do sleep 0.05; done; "
                "cat /proc/$p/cmdline | tr '\\0' ' '; echo; "
                "pidof sleep; echo $p; killall sleep; ps -A -o NAME | wc -l")
    cmdline, pidof, pid, count = out.strip().splitlines()
    # Under qemu-user, qemu's own command line would come first without the device's fix
    # (android_root.py); natively the kernel's is a phone's.
    assert cmdline.strip() == "sleep 20"
    assert pidof.split() == [pid]
    assert int(count) < 20  # this device's processes, not the machine's


@ONE_ADB_SERVER
def test_system_is_read_only_even_to_root(adb_server, android_root_device):
    out = shell(adb_server, android_root_device, "touch /system/droidheap-test || echo refused")
    assert "refused" in out


@ONE_ADB_SERVER
def test_perfettos_tracing_service_runs_with_googles_heapprofd_as_a_producer(adb_server,
                                                                            android_root_device):
    """init starts traced and traced_probes (persist.traced.enable=1); the device's perfetto
    command reaches traced and lists the data source of Google's heapprofd (running as root)."""
    assert shell(adb_server, android_root_device,
                 "getprop init.svc.traced; getprop init.svc.traced_probes").split() == [
        "running", "running"]
    deadline = time.monotonic() + 30  # heapprofd retries its connection to traced
    while not _lists_heapprofd_as_producer(listed := shell(adb_server, android_root_device,
                                                           "perfetto --query")) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _lists_heapprofd_as_producer(listed), listed


def _lists_heapprofd_as_producer(listed: str) -> bool:
    """heapprofd's own producer, beside traced's lazy producer that would start it: tracebox's
    table (Android 10's device) lists DATA SOURCE, PRODUCER; Android 11's perfetto a text proto."""
    return any(line.split()[:2] == ["android.heapprofd", "android.heapprofd"]
               for line in listed.splitlines()) or re.search(
        r'producers: \{\s*id: \d+\s*name: "android\.heapprofd"', listed) is not None


def _bionic_libc(release) -> bytes:
    """The userland's own libc.so (under its runtime APEX), read from its archive."""
    with tarfile.open(release.rootfs) as archive:
        (member,) = [m for m in archive.getmembers()
                     if m.isfile() and m.name.endswith("lib64/bionic/libc.so")]
        return archive.extractfile(member).read()


def test_bionic_asks_for_its_releases_entry_points_and_signal(android_release):
    """What the device's own bionic says it does, where 10 and 11 differ: the name of the client's
    heap walk it looks up (heapprofd_ + "iterate" on 10, + "malloc_iterate" on 11: droidheap's
    client exports both), and 11's handler of the profiling signal, which logs the sigqueue()
    value it acts on and rejects a process that is not profileable (10's has neither)."""
    libc = _bionic_libc(android_release)
    eleven = android_release.version >= 11
    assert (b"\0iterate\0" in libc) == (not eleven)
    assert b"\0malloc_iterate\0" in libc
    assert (b"received profiling signal with si_value" in libc) == eleven
    assert (b"profiling signal rejected (not profileable)" in libc) == eleven

