"""Whole profiling sessions through a real adb server (ONE_ADB_SERVER; both adb binaries where the
link is lost) and the emulation-layer test device: the preload mode on a device whose adbd runs as
the shell user, the root mode on one that runs as root; the site bytes as exact as on --local, and
the device left as it was on every exit path. 32-bit x86 (-m32), droidheap's own faults and the
device's lost links run here; the routes a real bionic takes (continuous dumps and killall, attach
after `droidheap shell`, a program started during the session) run on the Android devices
(test_android_sessions.py)."""
import os
import pathlib
import signal
import subprocess
import time

from droidheap import native
from droidheap.elf.headers import read_headers
from tests.e2e.conftest import compile_program, finished, kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing, single_process
from tests.e2e.test_stress import assert_nothing_lost, checksum
from tests.e2e.trace_check import assert_trace_processor_agrees, totals_by_leaf_function

from .conftest import (DEVICE_PROGRAM, ONE_ADB_SERVER, ROOT, AdbCli, device_bin_dir,
                       kill_device_program, start_test_adbd)


@ONE_ADB_SERVER
def test_spawned_profile_is_exact_and_leaves_nothing(cli, device, local_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", DEVICE_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert f"{device[1]} mode" in result.stderr
    if cli.shell("getprop ro.product.cpu.abilist32").strip():  # and no client built for it
        assert "32-bit processes are not profiled" in result.stderr
    assert "done" in result.stdout
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", local_program)), 1)
    # The program is only on the device: pulled beside the outputs, it names the sites.
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr
    pulled = out / "device-files" / DEVICE_PROGRAM.lstrip("/")
    assert pulled.is_file()
    # Kept per build id for the next run, which need not pull it again.
    data = pulled.read_bytes()
    cached = (pathlib.Path(os.environ["DROIDHEAP_CACHE_DIR"]) / "device-files"
              / read_headers(data).build_id(data) / pulled.name)
    assert cached.read_bytes() == data
    assert_trace_processor_agrees(out, local_program)
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_a_32_bit_program_is_profiled_through_the_32_bit_client(adb_server, root_device, tmp_path,
                                                                 native_build_i386):
    """A 64-bit rooted device runs 32-bit app processes too: bionic loads /system/lib's client
    into them, which becomes ours for the session, and the one daemon unwinds them."""
    program = tmp_path / "alloc_sites32"
    compile_program(ROOT / "tests" / "programs" / "alloc_sites.c", program, "x86")
    cli = AdbCli(adb_server, root_device.serial)
    assert cli.shell("getprop ro.product.cpu.abilist32").strip() == "x86"
    # The x86 client droidheap pushes: the -m32 build's.
    cli.env["DROIDHEAP_BIN_DIR"] = str(device_bin_dir(tmp_path / "bin", {"x86": native_build_i386}))
    adb_server.adb("-s", cli.serial, "push", str(program), DEVICE_PROGRAM + "32")
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", DEVICE_PROGRAM + "32")
    assert result.returncode == 0, result.stderr
    assert "no droidheap client for x86" not in result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", program)), 1)
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr
    assert_trace_processor_agrees(out, program)
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_the_stress_program_built_32_bit_is_unaffected(adb_server, root_device, tmp_path,
                                                       native_build_i386):
    """tests/e2e/test_stress.py's program as a 32-bit app process, through the 32-bit client."""
    program = tmp_path / "stress32"
    compile_program(ROOT / "tests" / "programs" / "stress.c", program, "x86")
    cli = AdbCli(adb_server, root_device.serial)
    cli.env["DROIDHEAP_BIN_DIR"] = str(device_bin_dir(tmp_path / "bin", {"x86": native_build_i386}))
    device_program = "/data/local/tmp/stress32"
    adb_server.adb("-s", cli.serial, "push", str(program), device_program)
    argv = [device_program, "20000", device_program, "child"]
    plain = adb_server.adb("-s", cli.serial, "shell", " ".join(argv), check=False)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", *argv, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert checksum(result.stdout) == checksum(plain.stdout)
    assert_nothing_lost(cli.run("report", out, "--json").stdout, result.stderr, 20000, 1)
    cli.shell(f"rm -f {device_program}")
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_a_program_with_a_malloc_of_its_own_is_named_with_why(cli, adb_server, device, tmp_path):
    """The client stays out of a program whose malloc is its own, and the reason is read off the
    device (its ELF file, a few blocks through adb) rather than guessed."""
    program = tmp_path / "own_malloc"
    subprocess.run(["cc", "-O1", "-pthread", str(ROOT / "tests" / "programs" / "own_allocator.c"),
                    str(ROOT / "tests" / "programs" / "alloc_sites.c"), "-o", str(program)],
                   check=True)
    on_device = "/data/local/tmp/own_malloc"
    adb_server.adb("-s", device[0], "push", str(program), on_device)
    result = cli.run("-o", tmp_path / "out", "--", on_device)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert (f"warning: {on_device} (pid " in result.stderr and "never connected to droidheapd "
            "(its malloc is its own, an allocator linked into it" in result.stderr), result.stderr
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_duration_ends_a_spawned_session_and_the_program_goes_on(cli, device, local_program,
                                                                 tmp_path):
    out = tmp_path / "out"
    go = "/data/local/tmp/go-duration"
    cli.shell(f"rm -f {go}")
    session = cli.start("-d", "1500", "-i", "1", "-o", out, "--", DEVICE_PROGRAM,
                        "--wait-file", go)
    try:
        read_line_containing(session.stderr, "stopped profiling after 1500 ms", 60)
        cli.shell(f"touch {go}")  # the program's sites come after the profile has ended
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        cli.shell(f"touch {go}")
        kill_all(session)
    per_function = single_process(totals_by_leaf_function(out / "raw-trace", local_program))
    assert "heartbeat" in per_function and "site_leak_malloc" not in per_function, per_function
    cli.assert_left_as_it_was()


def start_waiting(cli, go: str, out):
    """A session of the test program, waiting for the device file `go`."""
    cli.shell(f"rm -f {go}")
    session = cli.start("-o", out, "-i", "1", "--", DEVICE_PROGRAM, "--wait-file", go)
    try:
        read_line_containing(session.stdout, "waiting pid=", 30)
    except BaseException:
        kill_all(session)
        raise
    return session


@ONE_ADB_SERVER
def test_a_killed_droidheap_is_repaired_by_the_next_run(cli, device, tmp_path):
    go = "/data/local/tmp/go-killed"
    session = start_waiting(cli, go, tmp_path / "first")
    try:
        session.send_signal(signal.SIGKILL)  # droidheap alone: its streams to adb close
        session.wait()
        # The daemon's stream closed with it: the daemon stops, as on a phone.
        deadline = time.monotonic() + 15
        while cli.shell("pidof droidheapd").strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cli.shell("pidof droidheapd").strip() == ""
    finally:
        cli.shell(f"touch {go}")
        kill_all(session)
    result = cli.run("-o", tmp_path / "second", "--", DEVICE_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert "undid the changes an earlier session left" in result.stderr
    assert "an earlier session's trace is still on the device" in result.stderr
    # `droidheap pull` collects it: the program was waiting, its allocations so far were dumped.
    pulled = cli.run("pull", "-o", tmp_path / "pulled")
    assert pulled.returncode == 0, pulled.stderr
    (trace_out,) = (tmp_path / "pulled").iterdir()
    assert (trace_out / "raw-trace").stat().st_size > 0
    assert list(trace_out.glob("heap_dump.*.pb.gz")), pulled.stdout + pulled.stderr
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_a_daemon_killed_mid_session_leaves_nothing(cli, device, tmp_path):
    go = "/data/local/tmp/go-daemon-killed"
    session = start_waiting(cli, go, tmp_path / "out")
    try:
        cli.shell("killall -9 droidheapd")
        cli.shell(f"touch {go}")
        stdout, stderr = finished(session, 120)
    finally:
        cli.shell(f"touch {go}")
        kill_all(session)
    assert session.returncode != 0
    assert "droidheapd was killed by signal 9" in stderr, stderr
    assert "Traceback" not in stderr
    assert "done" in stdout  # the program went on
    # Its socket is removed with the rest of the session's state; its log kept with the outputs.
    assert "droidheapd: listening" in (tmp_path / "out" / "droidheapd.log").read_text()
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_bad_targets_are_one_line(cli, device):
    result = cli.run("-n", "no_such_program", "--no-startup")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(
        "droidheap: no process named no_such_program on adb device")
    assert "Traceback" not in result.stderr


@ONE_ADB_SERVER
def test_without_root_only_preloaded_programs_can_be_attached(adb_server, shell_device):
    cli = AdbCli(adb_server, shell_device.serial)
    sleeper = cli.start("shell", "--", "sh", "-c", "echo started; exec sleep 30")
    plain = None
    try:
        read_line_containing(sleeper.stdout, "started", 30)
        # `droidheap shell` preloads our library: attachable. A plain `adb shell` program is not.
        plain = subprocess.Popen([str(adb_server.binary), "-s", shell_device.serial, "shell",
                                  "exec sleep 31"], env=cli.env)
        time.sleep(1)
        result = cli.run("--mode", "preload", "-n", "sleep", "-d", "500")
        assert result.returncode != 0
        assert "was not started with droidheap's preload library" in result.stderr
        assert "Traceback" not in result.stderr
        # In auto mode the platform's heapprofd takes them (here a stand-in perfetto, which
        # records nothing: one line says so).
        result = cli.run("-n", "sleep", "-d", "300")
        assert "platform mode: without root" in result.stderr, result.stderr
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("droidheap: ")
    finally:
        cli.shell("pkill sleep")
        kill_all(sleeper)
        if plain is not None:
            plain.kill()


def test_a_device_lost_midway_is_one_line(adb_server, local_program, extra_adbds, tmp_path):
    adbd = start_test_adbd(root=False)
    extra_adbds.append(adbd)
    serial = adb_server.connect(adbd)
    adb_server.adb("-s", serial, "push", str(local_program), DEVICE_PROGRAM)
    cli = AdbCli(adb_server, serial)
    session = cli.start("-o", tmp_path / "out", "--", DEVICE_PROGRAM, "--wait-file",
                        "/data/local/tmp/never")
    pid = None
    try:
        pid = int(read_line_containing(session.stdout, "waiting pid=", 30).split("=")[1])
        adbd.stop()  # the phone is unplugged
        _, stderr = finished(session, 120)
    finally:
        kill_all(session)
        kill_device_program(pid)
    assert "the adb link to" in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("droidheap: ")]
    assert session.returncode != 0 and "Traceback" not in stderr, stderr
    assert lines[-1].startswith("droidheap: "), stderr


def test_a_dropped_adb_link_leaves_the_dumps_for_pull(adb_server, local_program, extra_adbds,
                                                      tmp_path):
    """The cable is pulled, the phone lives on: adbd ends the daemon's stream, the daemon writes
    its last dump and stops; plugged in again, `droidheap pull` collects it."""
    adbd = start_test_adbd(root=False)
    extra_adbds.append(adbd)
    serial = adb_server.connect(adbd)
    adb_server.adb("-s", serial, "push", str(local_program), DEVICE_PROGRAM)
    cli = AdbCli(adb_server, serial)
    session = cli.start("-o", tmp_path / "out", "-i", "1", "--", DEVICE_PROGRAM,
                        "--linger", "60000")
    try:
        read_line_containing(session.stdout, "done", 60)
        adb_server.adb("disconnect", serial)
        _, stderr = finished(session, 120)
    finally:
        kill_all(session)
    assert session.returncode != 0 and "Traceback" not in stderr, stderr
    adb_server.connect(adbd)
    pulled = cli.run("pull", "-o", tmp_path / "pulled")
    assert pulled.returncode == 0, pulled.stderr
    assert "undid the changes an earlier session left on the device" in pulled.stderr
    (trace_out,) = (tmp_path / "pulled").iterdir()
    # Every allocation was made before the link dropped: the last dump holds them all.
    assert_sites(single_process(totals_by_leaf_function(trace_out / "raw-trace", local_program)), 1)
    cli.shell("pkill -f alloc_sites")
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_sigterm_ends_a_session_with_its_profile_and_nothing_left(cli, device, local_program,
                                                                  tmp_path):
    out = tmp_path / "out"
    session = cli.start("-o", out, "-i", "1", "--", DEVICE_PROGRAM, "--linger", "60000")
    try:
        read_line_containing(session.stdout, "done", 60)
        session.terminate()
        _, stderr = finished(session, 120)
    finally:
        kill_all(session)
    assert "Traceback" not in stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", local_program)), 1)
    cli.shell("pkill -f alloc_sites")
    cli.assert_left_as_it_was()


@ONE_ADB_SERVER
def test_a_device_abi_without_binaries_is_one_line(adb_server, local_program, extra_adbds):
    adbd = start_test_adbd(root=True, abi="riscv64")  # an ABI nothing here builds for
    extra_adbds.append(adbd)
    serial = adb_server.connect(adbd)
    # Said first, before a process is looked up by name: what the user can do about it.
    for args in (["--", "/system/bin/sh", "-c", "true"], ["-n", "no-such", "--no-startup"]):
        result = AdbCli(adb_server, serial).run(*args)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            f"droidheap: no droidheap binaries for riscv64 (Android) in this install: "
            f"{native.ANDROID_BINARIES_HINT}")
