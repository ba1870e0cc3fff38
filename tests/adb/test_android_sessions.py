"""Whole profiling sessions on the Android test devices (Android 10's own userland under
qemu-user, Android 11's natively) through a real adb server: a program built as the NDK builds an
app's code, loaded by bionic's own linker, whose malloc dispatch and heapprofd hooks load
droidheap's client; the site bytes exact, the end of each program seen as an exit, and the
platform's heapprofd, clients and properties as they were afterwards.

Where the two releases differ, both are run: Android 10 takes the profiling signal however it is
sent and looks up the client's `heapprofd_iterate`; Android 11 takes it only from sigqueue() with
value 0, asks whether the process is profileable first, and looks up `heapprofd_malloc_iterate`
(spawn and attach). The routes bionic takes alike in both (heapprofd.enable.<name> and
heapprofd.enable=all at start, a preloaded program's signal, `killall -USR1`) run on Android 11,
natively, in seconds; Android 10's arm64 device, under qemu, keeps what is ARM's (arm64-v8a,
armeabi-v7a and its .ARM.exidx tables)."""
import pathlib
import signal
import subprocess
import time

import pytest

from tests.android import compile_android_program
from tests.e2e.conftest import finished, kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing, single_process
from tests.e2e.trace_check import (assert_trace_processor_agrees, function_frames,
                                   read_dumps, totals_by_leaf_function)

from .conftest import DEVICE_PROGRAM, ROOT, AdbCli, serve_adb

GO = "/data/local/tmp/go"
DEVICE_PROGRAM32 = "/data/local/tmp/alloc_sites32"
# Routes both releases take alike: on the Android 11 device only (see the module's docstring).
ANDROID_11_ONLY = pytest.mark.parametrize("android_release", ["android11"], indirect=True)


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    """Google's adb only (the one users get), for CI time: each session here takes half a minute
    under qemu, and what the adb binary does in one (push, shell, forward, pull) is the same as on
    the emulator device, whose sessions run over both binaries; test_android_device.py runs this
    device over Debian's adb too. droidheap pushes its Android binaries (scripts/install's)."""
    yield from serve_adb("adb36", tmp_path_factory, android=True)


@pytest.fixture(scope="module")
def android_program(tmp_path_factory, android_release):
    return compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                   tmp_path_factory.mktemp("android-programs") / "alloc_sites",
                                   android_release.abi)


def pushed(adb_server, device, program) -> AdbCli:
    adb_server.adb("-s", device.serial, "push", str(program), DEVICE_PROGRAM)
    return AdbCli(adb_server, device.serial)


@pytest.fixture
def android_cli(adb_server, android_root_device, android_program):
    return pushed(adb_server, android_root_device, android_program)


@pytest.fixture
def android_preload_cli(adb_server, android_shell_device, android_program):
    """The Android device whose adbd runs as the shell user: droidheap's preload mode."""
    return pushed(adb_server, android_shell_device, android_program)


@pytest.fixture(params=["root", "preload"])
def spawning_cli(request, adb_server, android_program):
    """(cli, mode): root mode, where bionic's heapprofd hooks load the client in place of
    Google's; preload mode, where bionic's linker loads it from LD_PRELOAD."""
    name = "android_cli" if request.param == "root" else "android_preload_cli"
    return request.getfixturevalue(name), request.param


@ANDROID_11_ONLY
def test_what_a_spawned_shell_runs_is_profiled_in_preload_mode_and_said_in_root(
        spawning_cli, android_program, tmp_path):
    """`-- sh -c 'prog | cat'`: the preload library is in the environment of every program the
    shell runs, each loading the client at its start (DROIDHEAP_PROFILE=all), and droidheapd
    takes the shell's descendants; root's route takes programs by name, says how to take them,
    and names those that ran."""
    cli, mode = spawning_cli
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", "sh", "-c",
                     f"{DEVICE_PROGRAM} --linger 300 | cat")
    assert result.returncode == 0, result.stderr
    per_pid = totals_by_leaf_function(out / "raw-trace", android_program)
    programs = [totals for totals in per_pid.values() if "site_leak_malloc" in totals]
    if mode == "preload":
        assert len(programs) == 1, per_pid.keys()
        assert_sites(programs[0], 1)
    else:
        assert programs == [], per_pid.keys()
        assert "root mode profiles the programs sh runs only when they are named sh: --mode " \
            "preload profiles every one of them" in result.stderr, result.stderr
        # And at the end, which ones.
        assert "that sh ran never connected (root mode loads droidheap only into programs " \
            "named sh: --mode preload profiles them all): pid " in result.stderr, result.stderr
        assert "(alloc_sites --linger 300)" in result.stderr, result.stderr
    cli.assert_left_as_it_was()


def test_spawn_through_bionic_is_exact(spawning_cli, android_program, android_release, tmp_path):
    cli, mode = spawning_cli
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", DEVICE_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert f"{android_release.banner}, {mode} mode" in result.stderr
    assert "done" in result.stdout
    # The program's exit is seen as one (bionic calls the client's finalize as it exits), and its
    # memory read then.
    assert "note: the process exited with status 0" in result.stderr, result.stderr
    assert "the process as it exited: RSS" in result.stderr, result.stderr
    # Every stack unwound to its root in bionic's libc.so, whose mappings qemu-user's view of the
    # program's maps leaves out (ndk_client/unwinder/process_maps.h).
    assert "unwinding errors" not in result.stderr, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", android_program)), 1)
    # Pulled from the device and named: the program as bionic's linker loaded it (lld's layout).
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr
    assert_trace_processor_agrees(out, android_program)
    # Root: heapprofd running again (restarted by init), both clients unmounted, properties
    # cleared; both: nothing of the session left.
    cli.assert_left_as_it_was()


@pytest.mark.parametrize("android_release", ["android10"], indirect=True)  # 11's: no 32-bit bionic
def test_armeabi_v7a_stacks_unwind_through_ehabi_tables_to_their_roots(
        adb_server, android_root_device, tmp_path):
    """A 32-bit program built as the NDK builds armeabi-v7a code (Thumb-2, .ARM.exidx and no
    .eh_frame), unwound by the 64-bit droidheapd through the EHABI tables of the program and of
    bionic's libc (no frame pointers there): exact sites, every stack whole."""
    program = compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                      tmp_path / "alloc_sites32", "armeabi-v7a")
    adb_server.adb("-s", android_root_device.serial, "push", str(program), DEVICE_PROGRAM32)
    cli = AdbCli(adb_server, android_root_device.serial)
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--", DEVICE_PROGRAM32)
    assert result.returncode == 0, result.stderr
    assert "unwinding errors" not in result.stderr, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", program)), 1)
    # Outermost: the start files' _start_main (EXIDX_CANTUNWIND) or a thread's start in libc;
    # main is called by libc's __libc_init, printf's buffer allocated inside libc.
    stacks = single_process(function_frames(out / "raw-trace", program))
    for stack in stacks:
        assert stack[-1] == "_start_main" or stack[-1].endswith("/libc.so"), stack
        if "main" in stack:
            assert stack[stack.index("main") + 1].endswith("/libc.so"), stack
    assert any(s[-1] == "_start_main" for s in stacks) and any(
        s[-1].endswith("/libc.so") and "thread_main" in s for s in stacks), stacks
    assert_trace_processor_agrees(out, program)
    cli.assert_left_as_it_was()


def summary_of(said: str, pid: int) -> str:
    """The end-of-run summary's paragraphs about `pid` (one per heap; droidheap's notes may come
    right before the first)."""
    heading = f"\npid {pid} ("
    return "\n".join(p[p.index(heading) + 1:] for p in ("\n" + p for p in said.split("\n\n"))
                     if heading in p)


def start_on_device(cli: AdbCli, *argv: str) -> subprocess.Popen:
    """A program started by `adb shell`, as a user starts one, its output read here."""
    return subprocess.Popen([str(cli.adb_server.binary), "-s", cli.serial, "shell", *argv],
                            env=cli.env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.parametrize("name", ["alloc_sites", "alloc_site?"])
def test_attach_by_name_and_by_pid_through_bionics_profiling_signal(android_cli, android_program,
                                                                    android_release, tmp_path,
                                                                    name):
    """Bionic's own handler of the profiling signal loads the client into two running programs,
    one named by -n (by its name, or by a pattern matching its name alone), one given by -p;
    both outlive the session with the client still mapped, and the bind mount over the
    platform's client is undone all the same."""
    if name != "alloc_sites" and android_release.version == 10:
        pytest.skip("a pattern resolves as a name does but for the listing (Android 11 runs it)")
    out = tmp_path / "out"
    # The same program under a name -n does not match (toybox's pidof compares whole names).
    by_pid = DEVICE_PROGRAM + "_by_pid"
    host_copy = tmp_path / "alloc_sites_by_pid"  # its frames found by the file's name
    host_copy.symlink_to(android_program)
    android_cli.shell(f"rm -f {GO}; cp {DEVICE_PROGRAM} {by_pid}")
    programs = [start_on_device(android_cli, path, "--wait-file", GO, "--linger", "60000")
                for path in (DEVICE_PROGRAM, by_pid)]
    session = None
    try:
        pids = [int(read_line_containing(p.stdout, "waiting pid=", 30).split("=")[1])
                for p in programs]
        session = android_cli.start("-n", name, "-p", pids[1], "--no-startup", "-o", out,
                                    "-i", "1")
        attached = {read_line_containing(session.stderr, "attached to pid", 60).split()[-1]
                    for _ in pids}
        assert attached == set(map(str, pids)), attached
        android_cli.shell(f"touch {GO}")
        for program in programs:
            read_line_containing(program.stdout, "done", 60)
        session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
        for pid, program in zip(pids, (android_program, host_copy)):
            assert_sites(totals_by_leaf_function(out / "raw-trace", program)[pid], 1)
        assert_trace_processor_agrees(out, android_program)
        assert sorted(android_cli.shell("pidof alloc_sites alloc_sites_by_pid").split()) == \
            sorted(map(str, pids))  # still running
        android_cli.assert_left_as_it_was()
    finally:
        kill_all(session, *programs)
        android_cli.shell(f"killall alloc_sites alloc_sites_by_pid; rm -f {by_pid}")


def continuous_dumps_and_killall_usr1(cli, out: pathlib.Path, root: bool, period_ms: int,
                                      linger_ms: int) -> None:
    """A spawned session dumping every `period_ms`, and a dump asked for by `killall -USR1
    droidheapd` on the device while the program lingers."""
    session = cli.start("-o", out, "-i", "1", "-c", str(period_ms), "--", DEVICE_PROGRAM,
                        "--linger", str(linger_ms))
    try:
        read_line_containing(session.stdout, "done", 120)
        if root:  # the platform's heapprofd is out of the way while it runs
            assert cli.shell("getprop init.svc.heapprofd").strip() == "stopped"
            assert cli.shell("ls /dev/socket/heapprofd.droidheap-saved").strip()
        cli.shell("killall -USR1 droidheapd")
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(session)
    (dumps,) = read_dumps(out / "raw-trace").values()
    assert len(dumps) >= 4  # the periodic ones, the one asked for, and the last


def attach_to_a_program_started_with_droidheap_shell(cli, out: pathlib.Path, by: str) -> None:
    """`droidheap shell` starts the program (preloaded where the device has no root), which waits
    for a file; a session attaches to it by pid or by name, then the file is made, and the
    program's exit ends the session, seen as an exit."""
    go = "/data/local/tmp/go"
    cli.shell(f"rm -f {go}")
    program = cli.start("shell", "--", DEVICE_PROGRAM, "--wait-file", go)
    session = None
    pid = None
    try:
        pid = int(read_line_containing(program.stdout, "waiting pid=", 60).split("=")[1])
        # By pid, or by name with --no-startup: the session ends with the process.
        target = ["-p", str(pid)] if by == "pid" else ["-n", "alloc_sites", "--no-startup"]
        session = cli.start(*target, "-o", out, "-i", "1")
        read_line_containing(session.stderr, f"attached to pid {pid}", 60)
        time.sleep(0.2)
        cli.shell(f"touch {go}")
        assert program.wait(timeout=120) == 0
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(program, session)
        if pid is not None:  # a pid of the device's own PID namespace
            cli.shell(f"kill -9 {pid} 2>/dev/null")
    assert "note: the process exited\n" in summary_of(stderr, pid), stderr


@ANDROID_11_ONLY
def test_a_program_started_during_the_session_is_profiled_from_its_start_where_root_allows(
        spawning_cli, android_program, tmp_path):
    """Root: bionic reads heapprofd.enable.<name> as the program starts, and loads the client. At
    the default interval (4096): each site within its sampling error. Preload: only what
    droidheap starts carries the library, and the session says so."""
    cli, mode = spawning_cli
    out = tmp_path / "out"
    if mode == "preload":
        result = cli.run("-n", "alloc_sites", "--no-running", "-o", out)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert "cannot profile a process from its start" in result.stderr.splitlines()[-1]
        return
    session = program = None
    try:
        session = cli.start("-n", "alloc_sites", "-o", out)
        read_line_containing(session.stderr, "from the start of each new process", 60)
        program = start_on_device(cli, DEVICE_PROGRAM)
        assert "done" in finished(program, 120, "the program")[0]
        session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(session, program)
    # Not started by droidheap: its status is not known, its exit is.
    assert "note: the process exited\n" in stderr, stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", android_program)),
                 4096)
    assert_trace_processor_agrees(out, android_program)
    cli.assert_left_as_it_was()


@ANDROID_11_ONLY
def test_continuous_dumps_and_toyboxs_killall_usr1(spawning_cli, android_program, tmp_path):
    cli, mode = spawning_cli
    out = tmp_path / "out"
    continuous_dumps_and_killall_usr1(cli, out, root=mode == "root", period_ms=1000,
                                      linger_ms=5000)
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", android_program)), 1)
    assert_trace_processor_agrees(out, android_program)
    cli.assert_left_as_it_was()


@ANDROID_11_ONLY
@pytest.mark.parametrize("by", ["name", "pid"])
def test_attach_to_a_program_started_with_droidheap_shell(spawning_cli, android_program,
                                                          tmp_path, by):
    cli, _ = spawning_cli
    out = tmp_path / "out"
    attach_to_a_program_started_with_droidheap_shell(cli, out, by)
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", android_program)), 1)
    assert_trace_processor_agrees(out, android_program)
    cli.assert_left_as_it_was()


@ANDROID_11_ONLY
def test_all_signals_every_bionic_process_but_the_platforms_heapprofd(android_cli,
                                                                      android_program, tmp_path):
    """--all: every running process on bionic's libc is signalled (not Google's heapprofd, which
    the session stops), and bionic reads heapprofd.enable=all in each one that starts."""
    out = tmp_path / "out"
    android_cli.shell(f"rm -f {GO}")
    running = start_on_device(android_cli, DEVICE_PROGRAM, "--wait-file", GO)
    session = started = None
    try:
        running_pid = int(read_line_containing(running.stdout, "waiting pid=", 30).split("=")[1])
        session = android_cli.start("--all", "-i", "1", "-o", out)
        read_line_containing(session.stderr, f"attached to pid {running_pid}", 60)
        started = start_on_device(android_cli, DEVICE_PROGRAM, "--wait-file", GO)
        started_pid = int(read_line_containing(started.stdout, "waiting pid=", 30).split("=")[1])
        read_line_containing(session.stderr, f"profiling pid {started_pid} from its start", 60)
        android_cli.shell(f"touch {GO}")
        assert running.wait(timeout=120) == 0 and started.wait(timeout=120) == 0
        session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(running, started, session)
        android_cli.shell("killall alloc_sites")
    # Both exits seen as exits, the attached program's as the started one's.
    for pid in (running_pid, started_pid):
        assert "note: the process exited\n" in summary_of(stderr, pid), stderr
    assert "cannot signal" not in (out / "droidheapd.log").read_text()
    per_pid = totals_by_leaf_function(out / "raw-trace", android_program)
    for pid in (running_pid, started_pid):
        assert_sites(per_pid[pid], 1)
    # The one started was `adb shell`'s sh until it exec'd the program, profiled as both; named
    # after the program in the trace (described again after the exec).
    assert_trace_processor_agrees(out, android_program)
    android_cli.assert_left_as_it_was()


def test_unreachable_memory_where_bionic_runs_the_program(spawning_cli, android_release,
                                                          tmp_path):
    """--unreachable under bionic's linker and libc, the client loaded by bionic's hooks (root) or
    the linker's LD_PRELOAD (preload): at -i 1 the exit sweep finds the blocks and bytes that
    LeakSanitizer finds on Linux (tests/e2e/test_unreachable.py), at the same call sites. Under
    qemu-user (Android 10) no thread can be held: the copy is taken as the program runs, every
    stack a root from its bottom, and the line says the registers were not read; there a stale
    pointer may keep a dropped block, never the reverse."""
    from tests.e2e.test_unreachable import (DROPPED_BLOCKS, DROPPED_BYTES, exit_sweep,
                                            unreachable_sites)
    cli, _ = spawning_cli
    program = compile_android_program(ROOT / "tests" / "programs" / "reachability.c",
                                      tmp_path / "reachability", android_release.abi)
    cli.adb_server.adb("-s", cli.serial, "push", str(program), "/data/local/tmp/reachability")
    out = tmp_path / "out"
    result = cli.run("-o", out, "-i", "1", "--unreachable", "--", "/data/local/tmp/reachability")
    blocks, size, complete, rest = exit_sweep(result)
    assert complete, result.stderr
    assert ("registers not read" in rest) == (not android_release.native), result.stderr
    _, sites = unreachable_sites(out)
    exact = {"site_dropped_list": (50 * 48, 50), "site_cycles": (20 * 48, 20),
             "site_dropped": (20 * 32, 20)}
    if android_release.native:
        assert (blocks, size) == (DROPPED_BLOCKS, DROPPED_BYTES), result.stderr
        assert sites == exact
    else:
        assert blocks > DROPPED_BLOCKS // 2 and size <= DROPPED_BYTES, result.stderr
        assert all(site in exact and figures <= exact[site] for site, figures in sites.items()), \
            sites
    cli.assert_left_as_it_was()


@ANDROID_11_ONLY
@pytest.mark.parametrize("seed", [1, 2])
def test_sampled_the_allocator_lists_the_blocks_between(android_cli, android_release, tmp_path,
                                                        seed):
    """Sampled, bionic's allocator lists every block in the copy (malloc_iterate), so pointers are
    followed through the blocks not sampled: every sampled block of a dropped list or cycle is
    found unreachable, not only those whose neighbours went unsampled; none that is kept."""
    from tests.e2e.test_unreachable import DROPPED_SITES, exit_sweep, unreachable_sites
    program = compile_android_program(ROOT / "tests" / "programs" / "reachability.c",
                                      tmp_path / "reachability", android_release.abi)
    android_cli.adb_server.adb("-s", android_cli.serial, "push", str(program),
                               "/data/local/tmp/reachability")
    out = tmp_path / "out"
    result = android_cli.run("-o", out, "-i", "64", "--seed", seed, "--unreachable", "--",
                             "/data/local/tmp/reachability")
    _, _, complete, rest = exit_sweep(result)
    assert not complete and "followed through all" in rest, result.stderr
    _, unreachable, in_use = unreachable_sites(out, in_use=True)
    assert unreachable == {site: figures for site, figures in in_use.items()
                           if site in DROPPED_SITES}, (unreachable, in_use)
    android_cli.assert_left_as_it_was()
