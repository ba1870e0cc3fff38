"""Programs of Android's own userland (mksh, toybox), not written for droidheap, in root mode on
the Android 11 test device (natively, bionic's own hooks).

- Attached while running: bionic answers the profiling signal by hooking malloc() alone, and mksh
  allocates with realloc() only (it imports no malloc), so it never loads the client, droidheap's
  (root mode) or Google's (platform mode); droidheap says so, and how to profile such a program,
  instead of "no profiled process allocated".
- Spawned: `droidheap -- sh -c ...` sets heapprofd.enable.sh, which every `sh` that starts
  meanwhile reads, droidheap's own `sh -c setprop ...` among them; only the program started is
  profiled (droidheapd takes its pid, held until it listens, and refuses the others)."""
import re
import time

import pytest

from tests.e2e.conftest import kill_all

from .conftest import AdbCli, serve_adb
from .test_android_sessions import start_on_device

pytestmark = pytest.mark.parametrize("android_release", ["android11"], indirect=True)

# Runs, allocating (mksh's strings grow and are dropped), until killed.
MKSH_LOOP = 'i=0; x=; while true; do i=$((i+1)); x="$x$i"; [ ${#x} -gt 4000 ] && x=; done'


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    """Google's adb (as test_android_sessions.py), droidheap pushing its Android binaries."""
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.fixture
def cli(adb_server, android_root_device) -> AdbCli:
    return AdbCli(adb_server, android_root_device.serial)


def mksh_loop_pid(cli: AdbCli) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in cli.shell("ps -A -o pid,args").splitlines():
            if "while true" in line and "ps -A" not in line:
                return int(line.split()[0])
        time.sleep(0.1)
    raise AssertionError("the mksh loop did not start")


@pytest.mark.parametrize("mode", ["root", "platform"])
def test_attaching_to_a_program_that_never_calls_malloc_says_why_it_is_not_profiled(cli, mode,
                                                                                   tmp_path):
    """Google's heapprofd (platform mode) meets the same wall as droidheapd: bionic's hook."""
    loop = start_on_device(cli, MKSH_LOOP)  # adbd's own `sh -c` runs it: one mksh
    try:
        pid = mksh_loop_pid(cli)
        result = cli.run("--mode", mode, "-p", pid, "--no-startup", "-d", 7000,
                         "-o", tmp_path / "out")
        # bionic took the signal ("received profiling signal" on the process's stderr here, in
        # logcat on a phone) and waits for a malloc() that mksh never makes.
        assert f"warning: pid {pid} was not profiled: it ran, and never connected, so it never " \
               f"called malloc()" in result.stderr, result.stderr
        assert "realloc() and calloc() do not count" in result.stderr
        assert "droidheap -- CMD" in result.stderr
        assert "it will at its next allocation" not in result.stderr
        if mode == "root":
            assert result.returncode == 0, result.stderr
            assert f"warning: pid {pid} runs, but has not connected" in result.stderr
        assert cli.shell(f"test -d /proc/{pid} && echo running").strip() == "running"
        cli.assert_left_as_it_was()
    finally:
        cli.shell("for p in $(ps -A -o pid,args | grep '[w]hile true' | cut -c1-8); do "
                  "kill $p; done")
        kill_all(loop)


def test_a_spawned_shell_is_profiled_alone_not_droidheaps_own_shells(cli, tmp_path):
    out = tmp_path / "out"
    result = cli.run("-i", 1, "-o", out, "--", "sh", "-c",
                     'i=0; while [ $i -lt 300 ]; do x="$x$i"; i=$((i+1)); done; echo done')
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    log = (out / "droidheapd.log").read_text()
    recording = re.findall(r"recording pid=(\d+)", log)
    assert len(recording) == 1, log
    pid = int(recording[0])
    # droidheap's `sh -c setprop heapprofd.enable.sh ''` read the property too: refused.
    assert "rejected pid=" in log, log
    assert f"\npid {pid} (sh -c i=0" in result.stderr, result.stderr
    assert len(re.findall(r"^pid \d+ \(", result.stderr, re.M)) == 1, result.stderr
    cli.assert_left_as_it_was()
