"""droidheap's platform mode against Google's own heapprofd (Android 10's and 11's), on the Android
test devices (a userdebug build of 10 under qemu-user, an eng build of 11 natively): the device's
`perfetto` command (Perfetto's tracebox on 10, whose own needs binder; 11's own) starts a session
on the device's traced, which starts heapprofd (traced.lazy.heapprofd); heapprofd signals the
targets, bionic loads Google's heapprofd_client.so into them, and the trace droidheap pulls is
converted like its own.

What Google's heapprofd does that these tests show, rather than work around:
- it books nothing a client allocated after that client's last batch of frees while the process
  runs (10 and 11): the program goes on allocating and freeing while it lingers
  (--linger-freeing), as an app's threads do;
- it drops a call site from its dumps once everything allocated there is freed (the churn site);
- Android 10's cannot unwind lld's API 29 layout (code on its own page): each stack is one frame
  whose rel_pc lacks the segment's load bias, then ERROR 2. droidheap adds the file's bias as it
  symbolizes, so that frame (the call site) is named; the other tests link the program as the NDK
  links an app with minSdk < 29 (--no-rosegment), which it unwinds whole. Android 11's unwinds
  both layouts whole;
- Android 10 ignores --dump-at-max (its dumps are totals); Android 11's dumps are the peak's;
- on both test devices, allocations on threads other than the main one are unwinding errors
  (ERROR_MEMORY_INVALID: "ERROR 1" in Android 10's trace, "ERROR MEMORY_INVALID" in 11's), the
  threads' bytes booked under one error frame. First put down to qemu-user (Google's client
  passes heapprofd the fd of its /proc/self/maps, which under qemu is a copy made when it was
  opened), but Android 11 runs natively and does the same: something of these devices that a
  phone has and they lack, not yet found. droidheap's own unwinder, on the same devices,
  unwinds every thread (test_android_sessions.py).
"""
import dataclasses
import signal
import subprocess
import time

import pytest

from tests.android import compile_android_program
from tests.e2e.conftest import finished, kill_all
from tests.e2e.expected_sites import sampling_bound, sites
from tests.e2e.test_profile import read_line_containing, single_process
from tests.e2e.trace_check import (assert_trace_processor_agrees, function_frames,
                                   last_pprof_of, read_dumps, totals_by_leaf_function)
from tests.trace_processor import totals_by_site_in_pprof

from .conftest import DEVICE_PROGRAM, ROOT, AdbCli, serve_adb
from .test_android_sessions import start_on_device

GO = "/data/local/tmp/go"
CLIENT_READY = "heapprofd_client initialized"  # what Google's client logs to stderr
# Perfetto's trace processor finds droidheap's platform config without flush_period_ms (it would
# load the whole trace into memory): deliberate, as heapprofd dumps every process on each flush.
CONFIG_FINDING = "config_write_into_file_no_flush"
# Sites whose bytes stay allocated: what heapprofd's dumps keep (see the module docstring).
KEPT_SITES = ("site_leak_malloc", "site_grow_realloc", "site_posix_memalign",
              "site_aligned_alloc")


@dataclasses.dataclass(frozen=True)
class Heapprofd:
    """Where Google's heapprofd of one release differs from the other's (the module docstring)."""
    error_frame: str  # how the summary names the threads' unwinding errors
    threads_unwound: bool  # threads' stacks unwound at times (11), never (10)
    dumps_at_max: bool  # --dump-at-max honoured: the dumps hold the peak's bytes
    unwinds_api29_layout: bool  # lld's layout for minSdk 29+, code on its own page


HEAPPROFD = {"android10": Heapprofd("ERROR 1", False, False, False),
             "android11": Heapprofd("ERROR MEMORY_INVALID", True, True, True)}


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory):
    """Google's adb only, for CI time (as test_android_sessions.py)."""
    yield from serve_adb("adb36", tmp_path_factory)


@pytest.fixture(scope="module")
def program(tmp_path_factory, android_release):
    """alloc_sites as the NDK links an app's code for minSdk < 29 (see the module docstring)."""
    return compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                   tmp_path_factory.mktemp("platform") / "alloc_sites",
                                   android_release.abi, rosegment=False)


@pytest.fixture(scope="module")
def heapprofd(android_release) -> Heapprofd:
    return HEAPPROFD[android_release.name]


@pytest.fixture
def cli(adb_server, android_root_device, program):
    adb_server.adb("-s", android_root_device.serial, "push", str(program), DEVICE_PROGRAM)
    return AdbCli(adb_server, android_root_device.serial)


def stop(session: subprocess.Popen) -> str:
    """Ctrl-C: perfetto stops, heapprofd writes its final dumps, the trace is pulled. Returns
    what droidheap said (its summary among it)."""
    session.send_signal(signal.SIGINT)
    _, stderr = finished(session, 180)
    assert session.returncode == 0, stderr
    assert "platform mode" in stderr
    return stderr


def assert_sites_as_heapprofd_books_them(per_function, interval: int, heapprofd: Heapprofd,
                                         threads: int = 4, at_max: bool = False):
    """Each kept site within its sampling error; the churn site whole or gone (all freed), or
    `at_max` (a dump of the peak, read as droidheap reads it) at most one block; the threads'
    allocations booked as error frames (see the module docstring), the same bytes, or where
    that heapprofd unwinds them at times (11), some or all of them under their own site."""
    expected = sites(threads)
    for name in KEPT_SITES:
        site, got = expected[name], per_function.get(name)
        assert got is not None, f"{name} missing: {sorted(per_function)}"
        bound = sampling_bound(site, interval)
        assert abs(got.in_use - site.in_use) <= bound, (name, got, site)
        if at_max:  # the peak's bytes only: heapprofd 11 writes no count of the peak
            continue
        assert abs(got.allocated - site.allocated) <= bound, (name, got, site)
        if interval == 1:
            assert got.alloc_count == site.objects, (name, got, site)
    churn, whole = per_function.get("site_churn_malloc_free"), expected["site_churn_malloc_free"]
    if at_max:  # the program's peak is at its end, long after the churn site's last free
        assert churn is None or churn.in_use <= whole.size, churn
    elif churn is not None:  # in the one dump after its last free, whole; forgotten after that
        assert abs(churn.allocated - whole.allocated) <= sampling_bound(whole, interval)
        assert churn.in_use == 0, churn
    # The threads' bytes, under their site or under error frames (with main's printf buffer,
    # 4 KiB, and on 11 what bionic allocates before main).
    threads_site = expected["site_thread_calloc"]
    if not heapprofd.threads_unwound:
        assert "site_thread_calloc" not in per_function, per_function
    booked = sum(per_function[name].in_use for name in ("site_thread_calloc", "?")
                 if name in per_function)
    assert abs(booked - threads_site.in_use) <= \
        sampling_bound(threads_site, interval) + 4096 + 256, (per_function, threads_site)


def assert_error_frames_are_the_threads(stacks, heapprofd: Heapprofd):
    """The only unwinding errors are heapprofd's one-frame error stacks (the threads'); no stack
    holds heapprofd's client, and the innermost of the program's frames is the function that
    allocated. Android 10's stacks start there; 11's start with bionic's malloc, and hold the
    allocations bionic and its linker make before main (the client loads as libc starts)."""
    errors = [s for s in stacks if s[0] == "/ERROR"]
    assert all(s == ["/ERROR"] for s in errors), errors
    assert errors or heapprofd.threads_unwound, stacks
    for stack in stacks:
        if stack != ["/ERROR"]:
            assert not any("heapprofd_client" in frame for frame in stack), stack
            programs = [frame for frame in stack if not frame.startswith("/")]
            assert not programs or programs[0] in (*sites(), "main", "heartbeat"), stack


def test_attach_by_name_and_pid_with_continuous_dumps(cli, program, heapprofd, tmp_path):
    """-n and -p of running programs, -c: heapprofd signals both, bionic loads Google's client;
    several dumps, each site within its sampling error at the default interval."""
    out = tmp_path / "out"
    by_pid = DEVICE_PROGRAM + "_by_pid"
    host_copy = tmp_path / "alloc_sites_by_pid"  # its frames found by the file's name
    host_copy.symlink_to(program)
    cli.shell(f"rm -f {GO}; cp {DEVICE_PROGRAM} {by_pid}")
    # Its stderr too (adb shell's sh reads the redirection): the line of Google's client.
    programs = [start_on_device(cli, path, "--wait-file", GO, "--linger-freeing", "60000", "2>&1")
                for path in (DEVICE_PROGRAM, by_pid)]
    session = None
    try:
        pids = [int(read_line_containing(p.stdout, "waiting pid=", 30).split("=")[1])
                for p in programs]
        session = cli.start("--mode", "platform", "-n", "alloc_sites", "-p", pids[1],
                            "-c", "3000", "-o", out)
        for p in programs:
            read_line_containing(p.stdout, CLIENT_READY, 90)
        cli.shell(f"touch {GO}")
        for p in programs:
            read_line_containing(p.stdout, "done", 90)
        time.sleep(7)  # two dumps after the last site, while the programs free
        said = stop(session)
    finally:
        kill_all(session, *programs)
        cli.shell(f"killall alloc_sites alloc_sites_by_pid; rm -f {by_pid}")
    assert "site_leak_malloc (alloc_sites.c:" in said, said  # the summary, symbolized
    if not heapprofd.threads_unwound:
        assert heapprofd.error_frame in said, said
    for pid, binary in zip(pids, (program, host_copy)):
        assert len(read_dumps(out / "raw-trace")[pid]) >= 3
        assert_sites_as_heapprofd_books_them(totals_by_leaf_function(out / "raw-trace",
                                                                      binary)[pid], 4096, heapprofd)
        assert_error_frames_are_the_threads(function_frames(out / "raw-trace", binary)[pid],
                                            heapprofd)
    assert_trace_processor_agrees(out, program, allowed=(CONFIG_FINDING,))
    assert_report_and_symbolize_read_it(cli, out)


@pytest.mark.parametrize("android_release", ["android11"], indirect=True)
def test_a_pattern_takes_the_running_programs_it_matches_by_pid(cli, program, tmp_path):
    """-n 'alloc_site?': Android 10 and 11's heapprofd matches process_cmdline exactly, so
    droidheap hands it the pids of the running programs the pattern matches."""
    out = tmp_path / "out"
    cli.shell(f"rm -f {GO}")
    running = start_on_device(cli, DEVICE_PROGRAM, "--wait-file", GO, "--linger-freeing", "2000",
                              "2>&1")
    session = None
    try:
        pid = int(read_line_containing(running.stdout, "waiting pid=", 30).split("=")[1])
        session = cli.start("--mode", "platform", "-n", "alloc_site?", "-o", out)
        read_line_containing(running.stdout, CLIENT_READY, 90)
        cli.shell(f"touch {GO}")
        read_line_containing(running.stdout, "done", 90)
        said = stop(session)
    finally:
        kill_all(session, running)
        cli.shell("killall alloc_sites")
    assert "a pattern takes the running processes it matches" in said, said
    assert list(read_dumps(out / "raw-trace")) == [pid]
    assert "site_leak_malloc (alloc_sites.c:" in said, said


def assert_report_and_symbolize_read_it(cli, out):
    report = cli.run("report", out)
    assert report.returncode == 0 and "site_leak_malloc" in report.stdout, report
    again = cli.run("symbolize", "-o", out / "again", out / "raw-trace")
    assert again.returncode == 0, again.stderr
    # The device's files are not here (no --symbols): said of each; of heapprofd's ERROR frames,
    # which name no file, nothing.
    unsymbolized = [line for line in again.stderr.splitlines() if "not symbolized" in line]
    assert not [line for line in unsymbolized if "ERROR" in line], again.stderr
    assert (out / "again" / "symbolized-trace").is_file()


def profile_from_its_start(cli, out, *flags) -> str:
    """A platform session on programs named alloc_sites; once heapprofd has set
    heapprofd.enable.alloc_sites, the program is started (one thread), runs to its end (two
    seconds of freeing: droidheap sees it run) and exits; then the session ends. Its summary."""
    session = started = None
    try:
        session = cli.start("--mode", "platform", "-n", "alloc_sites", *flags, "-o", out)
        deadline = time.monotonic() + 60
        while cli.shell("getprop heapprofd.enable.alloc_sites").strip() != "1":
            assert time.monotonic() < deadline, "heapprofd never enabled alloc_sites"
            time.sleep(0.5)
        started = start_on_device(cli, DEVICE_PROGRAM, "--threads", "1",
                                  "--linger-freeing", "2000")
        assert "done" in finished(started, 180, "the started program")[0]
        said = stop(session)
    finally:
        kill_all(session, started)
    assert cli.shell("getprop heapprofd.enable.alloc_sites").strip() == ""
    return said


# As the program exits, Google's client may find its buffer full (heapprofd then flags the
# profile as overran): seen here with the last of its 2000 heartbeats missing, nothing else.
OVERRAN_AT_EXIT = "heapprofd_buffer_overran"


def test_a_program_started_during_the_session_is_profiled_from_its_start(cli, program, heapprofd,
                                                                         tmp_path):
    """heapprofd sets heapprofd.enable.<name>, which bionic reads as the program starts; every
    allocation sampled (-i 1), the program's last dump written when it exits. --all-heaps is
    ignored (12+): malloc only. Android 10 ignores --dump-at-max too (its dumps are totals);
    Android 11's dump is the peak's, which droidheap reads as what was in use then."""
    out = tmp_path / "out"
    profile_from_its_start(cli, out, "-i", "1", "--dump-at-max", "--all-heaps")
    heaps = [p.name.split(".", 3)[3] for p in out.glob("heap_dump.*.pb.gz")]
    assert heaps == ["libc.malloc.pb.gz"], heaps
    (pid,) = read_dumps(out / "raw-trace")
    assert_sites_as_heapprofd_books_them(totals_by_site_in_pprof(last_pprof_of(out, pid), "site_"),
                                         1, heapprofd, threads=1, at_max=heapprofd.dumps_at_max)
    # Named by droidheap, which saw it run: Android 10's linux.process_stats names only the
    # processes running as the session starts, and heapprofd's dumps carry no name.
    assert_trace_processor_agrees(out, program, allowed=(CONFIG_FINDING, OVERRAN_AT_EXIT),
                                  at_peak=heapprofd.dumps_at_max)


def test_spawn_on_userdebug_and_the_ndks_api_29_layout_named_where_android_10_unwinds_it(
        adb_server, cli, android_release, heapprofd, tmp_path):
    """`-- CMD` (a userdebug or eng build: heapprofd profiles any program by name): the program
    starts once heapprofd has set heapprofd.enable.<name>, and is named after its command line.

    Built with lld's layout, as the NDK links an app for minSdk 29+: Android 10's heapprofd
    writes the leaf frame without the code segment's load bias (0x1000) and unwinds no further
    (ERROR 2); droidheap adds the file's bias as it symbolizes, so each site is still named,
    exact at -i 1, in its summary, its pprof files and the trace processor's view of its
    symbolized trace. Android 11's unwinds it whole."""
    program = compile_android_program(ROOT / "tests" / "programs" / "alloc_sites.c",
                                      tmp_path / "alloc_sites", android_release.abi)
    adb_server.adb("-s", cli.serial, "push", str(program), DEVICE_PROGRAM)
    out = tmp_path / "out"
    result = cli.run("--mode", "platform", "-i", "1", "-o", out, "--", DEVICE_PROGRAM,
                     "--threads", "1", "--linger-freeing", "2000")
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout and CLIENT_READY in result.stderr  # the program's own output
    assert f"({DEVICE_PROGRAM} --threads 1 --linger-freeing 2000)" in result.stderr
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr
    stacks = single_process(function_frames(out / "raw-trace", program))
    if heapprofd.unwinds_api29_layout:
        assert_error_frames_are_the_threads(stacks, heapprofd)
        assert any(stack[-1].endswith("/libc.so") and "main" in stack for stack in stacks)
    else:
        for stack in stacks:
            assert stack[-1] == "/ERROR", stack  # ERROR 2 above the first frame, or ERROR 1
    (pid,) = read_dumps(out / "raw-trace")
    per_function = totals_by_site_in_pprof(last_pprof_of(out, pid), "site_")
    assert_sites_as_heapprofd_books_them(per_function, 1, heapprofd, threads=1)
    assert_trace_processor_agrees(out, program, allowed=(CONFIG_FINDING, OVERRAN_AT_EXIT))
    assert cli.shell("getprop heapprofd.enable.alloc_sites").strip() == ""
