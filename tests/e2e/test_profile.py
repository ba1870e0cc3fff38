"""End to end through the emulator device: a multi-threaded C program profiled from its start and
by attaching, checked against the bytes it is known to allocate at each site."""
import os
import pathlib
import select
import shutil
import signal
import subprocess
import time

import pytest

from droidheap.native import host_abi
from tests.e2e.conftest import PROGRAMS, compiler, daemon_pids, finished, kill_all
from tests.e2e.expected_sites import sampling_bound, sites
from tests.e2e.trace_check import assert_trace_processor_agrees, totals_by_leaf_function
from tests.trace_processor import SiteTotals


def assert_outputs_exist(out: pathlib.Path):
    assert (out / "raw-trace").stat().st_size > 0
    assert (out / "symbolized-trace").stat().st_size > (out / "raw-trace").stat().st_size
    assert list(out.glob("heap_dump.*.*.libc.malloc.pb.gz")), sorted(out.iterdir())


def assert_sites(per_function, interval: int):
    for name, site in sites().items():
        got = per_function.get(name)
        bound = sampling_bound(site, interval)
        if got is None and bound >= site.allocated:
            # So few bytes (256 x 100 B at 4096: e^-6.25) that no sample among them can happen.
            got = SiteTotals()
        assert got is not None, f"{name} missing: {sorted(per_function)}"
        assert abs(got.allocated - site.allocated) <= bound, (name, got, site)
        assert abs(got.in_use - site.in_use) <= bound, (name, got, site)
        if interval == 1:
            assert got.alloc_count == site.objects, (name, got, site)
        if site.in_use == 0:  # every sampled block's free was seen, whatever the interval
            assert (got.in_use, got.free_count) == (0, got.alloc_count), (name, got)


def single_process(totals):
    assert len(totals) == 1, totals.keys()
    return next(iter(totals.values()))


def test_spawned_profile_is_exact_with_interval_1(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", alloc_program)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert_outputs_exist(out)
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)
    assert_trace_processor_agrees(out, alloc_program)


def test_a_program_whose_name_is_no_property_name_is_profiled(cli, alloc_program, tmp_path):
    """g++, c++: the emulator device loads the client into every program it starts, so a name
    that cannot be bionic's heapprofd.enable.<name> (a root device's way) is profiled all the
    same."""
    program = tmp_path / "alloc++"
    program.symlink_to(alloc_program)
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)


def test_an_allocator_preloaded_after_droidheap_s_is_the_one_profiled(cli, abi, alloc_program,
                                                                     tmp_path):
    """LD_PRELOAD=libjemalloc.so droidheap --local -- prog: the emulated libc forwards to the
    next allocator in the search order, the user's, whose blocks then meet none of glibc's
    functions (the client's malloc_usable_size went to the preloaded allocator's while the
    blocks were glibc's: the program crashed), and whose allocations are the ones profiled."""
    if abi != host_abi():
        pytest.skip("the emulator device keeps a user's LD_PRELOAD on this machine's ABI only")
    allocator = tmp_path / "libown_allocator.so"
    subprocess.run([compiler(abi), "-shared", "-fPIC", "-O1", "-o", str(allocator),
                    str(PROGRAMS / "own_allocator.c")], check=True)
    cli.env["LD_PRELOAD"] = str(allocator)
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", alloc_program)
    assert result.returncode == 0, result.stderr
    served = [line for line in result.stderr.splitlines() if line.startswith("own_allocator")]
    assert served and int(served[-1].split()[-1]) > 1000, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)


def test_a_failed_realloc_leaves_its_block_live(cli, programs, tmp_path):
    """The free of a realloc takes its place among the records before the call: when the call
    fails, that record is cancelled and the block stays in use, its later free still seen."""
    program = programs("failed_realloc")
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert "failed=64" in result.stdout
    kept = single_process(totals_by_leaf_function(out / "raw-trace", program))["site_kept"]
    assert (kept.alloc_count, kept.allocated, kept.in_use) == (64, 64000, 32000), kept


# Operations per thread of tests/programs/handed_frees.c: qemu-user runs arm64 ~10x slower.
HANDED_FREES_OPS = {"x86_64": 100000, "arm64-v8a": 15000}


@pytest.mark.parametrize("interval", [1, 4096])
def test_frees_from_other_threads_and_rings_all_arrive(cli, abi, programs, tmp_path, interval):
    """Threads that free and reallocate each other's blocks, writing to rings of their own once
    they took turns in a shared one: every sampled block's free is seen, at -i 1 too, where the
    kept blocks are counted exactly."""
    program = programs("handed_frees")
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", interval, "--", program, HANDED_FREES_OPS[abi])
    assert result.returncode == 0, result.stderr
    assert "kept=128" in result.stdout
    got = single_process(totals_by_leaf_function(out / "raw-trace", program, prefix="site_"))
    for name in ("site_churn", "site_churn_realloc"):
        churn = got[name]
        assert churn.alloc_count > 0 and churn.in_use == 0, (name, churn)
        assert churn.free_count == churn.alloc_count, (name, churn)
    if interval == 1:
        kept = got["site_kept"]
        assert (kept.alloc_count, kept.free_count, kept.in_use) == (128, 0, 128 * 777), kept


def test_spawned_profile_is_within_the_sampling_bound(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", alloc_program)
    assert result.returncode == 0, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 4096)
    assert_trace_processor_agrees(out, alloc_program)


def read_line_containing(stream, text, timeout_s):
    """The next line of a Popen's text `stream` that contains `text`, within `timeout_s`.

    It reads the pipe itself, keeping what follows the line on the stream for the next call:
    readline() would pull later lines into the stream's own buffer, where select() no longer sees
    them."""
    deadline = time.monotonic() + timeout_s
    seen = []
    pending = getattr(stream, "pending_text", "")
    fd = stream.fileno()
    try:
        while True:
            while "\n" in pending:
                line, pending = pending.split("\n", 1)
                seen.append(line + "\n")
                if text in line:
                    return line + "\n"
            if time.monotonic() >= deadline:
                break
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                pending += data.decode(errors="replace")
    finally:
        stream.pending_text = pending
    raise AssertionError(f"no line with {text!r} within {timeout_s}s: {seen + [pending]}")


def profile_attached(cli, argv, out, interval, target=lambda pid: ["-p", pid]) -> int:
    """Starts `argv` with `droidheap shell`, waiting for a go-file; attaches a session to it (the
    target flags `target(pid)` give) and lets it run to its end. Returns its pid."""
    go = out.parent / f"{out.name}.go"
    program = cli.start("--local", "shell", "--", *argv, "--wait-file", go)
    session = None
    try:
        pid = int(read_line_containing(program.stdout, "waiting pid=", 30).split("=")[1])
        session = cli.start("--local", *target(pid), "-o", out, "-i", interval)
        read_line_containing(session.stderr, f"attached to pid {pid}", 30)
        time.sleep(0.2)  # the client swaps its table in right after the handshake
        go.touch()
        assert program.wait(timeout=60) == 0
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(program, session)
    return pid


@pytest.mark.parametrize("by, interval", [("pid", 1), ("name", 4096)])
def test_attached_profile_reports_the_sites(cli, alloc_program, tmp_path, by, interval):
    out = tmp_path / "out"
    # --no-startup: the session ends with the process (test_targets.py covers startup).
    profile_attached(cli, [alloc_program], out, interval,
                     lambda pid: ["-p", pid] if by == "pid"
                     else ["-n", alloc_program.name, "--no-startup"])
    assert_outputs_exist(out)
    per_function = single_process(totals_by_leaf_function(out / "raw-trace", alloc_program))
    assert_sites(per_function, interval)
    if interval == 1:
        assert "heartbeat" in per_function  # allocations made while waiting were seen too
    assert_trace_processor_agrees(out, alloc_program)


def test_sigterm_stops_a_spawned_session_and_keeps_the_profile(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    session = cli.start("--local", "-o", out, "-i", "1", "--", alloc_program, "--linger", "60000")
    try:
        read_line_containing(session.stdout, "done", 60)
        session.terminate()
        _, stderr = finished(session, 120)
    finally:
        kill_all(session)
    assert "Traceback" not in stderr
    assert session.returncode == 128 + signal.SIGTERM, stderr
    assert "note: droidheap stopped it at SIGTERM: the process exited with status 143" in stderr
    assert_outputs_exist(out)
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)
    assert_trace_processor_agrees(out, alloc_program)


def test_ctrl_c_stops_a_spawned_program_and_droidheap_exits_130(cli, alloc_program, tmp_path):
    """A terminal's Ctrl-C reaches droidheap and the program in its process group: droidheap stops
    the program, keeps the profile and exits as a shell says a program stopped at Ctrl-C did."""
    out = tmp_path / "out"
    session = cli.start("--local", "-o", out, "-i", "1", "--", alloc_program, "--linger", "60000")
    try:
        read_line_containing(session.stdout, "done", 60)
        os.killpg(session.pid, signal.SIGINT)
        _, stderr = finished(session, 120)
    finally:
        kill_all(session)
    assert session.returncode == 130, stderr
    assert "note: droidheap stopped it at Ctrl-C: the process exited with status" in stderr, stderr
    assert "connection was lost" not in stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)


def test_program_still_runs_when_profiling_cannot_start(cli, alloc_program, device_root,
                                                        tmp_path):
    (device_root / "dev" / "socket" / "heapprofd").mkdir(parents=True)  # the daemon cannot bind
    result = cli.run("--local", "-o", tmp_path / "out", "--", alloc_program)
    assert "done" in result.stdout  # the program ran to its end
    assert result.returncode != 0
    assert "profiling cannot start" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("go") is None, reason="go (golang-go) is not installed")
def test_go_tool_pprof_reads_the_profile_with_function_names(cli, alloc_program, tmp_path):
    out = tmp_path / "out"
    assert cli.run("--local", "-o", out, "-i", "1", "--", alloc_program).returncode == 0
    (profile,) = out.glob("heap_dump.*.pb.gz")
    for index, expected in (("inuse_space", "site_leak_malloc"),
                            ("alloc_space", "site_churn_malloc_free")):
        top = subprocess.run(["go", "tool", "pprof", "-top", f"-sample_index={index}",
                              str(profile)], capture_output=True, text=True, timeout=120)
        assert top.returncode == 0, top.stderr
        assert expected in top.stdout, top.stdout
        assert "site_thread_calloc" in top.stdout


def test_continuous_dumps_and_on_demand_dump(cli, alloc_program, device_root, tmp_path):
    out = tmp_path / "out"
    session = cli.start("--local", "-o", out, "-i", "1", "-c", "300", "--",
                        alloc_program, "--linger", "1500")
    try:
        read_line_containing(session.stdout, "done", 60)
        before = set(daemon_pids(device_root))
        assert before, "droidheapd is not running"
        for pid in before:
            subprocess.run(["kill", "-USR1", str(pid)], check=True)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(session)
    dumps = sorted(out.glob("heap_dump.*.pb.gz"))
    # 1.5 s of lingering at one dump per 300 ms, plus the on-demand and the exit dumps.
    assert len(dumps) >= 4, dumps
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)
    assert_trace_processor_agrees(out, alloc_program)


STRIP = {"x86_64": "strip", "arm64-v8a": "aarch64-linux-gnu-strip"}


def test_symbols_dir_names_the_frames_of_a_stripped_program(cli, abi, alloc_program, tmp_path):
    """A program run stripped, its unstripped twin under --symbols DIR: the frames get names and
    lines, which without the flag they cannot."""
    stripped = tmp_path / "bin" / alloc_program.name
    stripped.parent.mkdir()
    subprocess.run([STRIP[abi], "-o", str(stripped), str(alloc_program)], check=True)
    plain = cli.run("--local", "-i", "1", "-o", tmp_path / "plain", "--", stripped)
    assert plain.returncode == 0, plain.stderr
    assert "site_leak_malloc" not in plain.stderr
    given = cli.run("--local", "--symbols", alloc_program.parent, "-i", "1",
                    "-o", tmp_path / "given", "--", stripped)
    assert given.returncode == 0, given.stderr
    assert "site_leak_malloc (alloc_sites.c:" in given.stderr, given.stderr


def test_a_program_linked_by_lld_is_unwound_and_named(cli, abi, tmp_path):
    """lld (LLVM's and the NDK's linker) starts the code on a new page in memory but not in the
    file: the code's mapping and the read-only one before it both say file offset 0, and only
    the code's permissions tell which segment, so which load bias, a pc is in."""
    if abi != host_abi():
        pytest.skip("clang builds it for this machine only")
    program = tmp_path / "alloc_sites_lld"
    subprocess.run(["clang", "-O1", "-fno-omit-frame-pointer", "-g", "-pthread", "-fuse-ld=lld",
                    str(pathlib.Path(__file__).parents[1] / "programs" / "alloc_sites.c"),
                    "-o", str(program)], check=True)
    layout = subprocess.run(["readelf", "-lW", str(program)], capture_output=True, text=True,
                            check=True).stdout
    code = [line.split() for line in layout.splitlines() if line.split()[:1] == ["LOAD"]
            and "E" in line.split()[6:-1]]
    assert code and int(code[0][1], 16) != int(code[0][2], 16), layout  # offset != address
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert "unwinding errors" not in result.stderr, result.stderr
    assert "site_leak_malloc (alloc_sites.c:" in result.stderr, result.stderr
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", program)), 1)
