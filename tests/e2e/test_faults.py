"""Faults: whatever fails, the profiled program goes on unaffected, what was captured is kept and
the device is left as it was found."""
import os
import signal
import tempfile
import time

import pytest

from droidheap.trace.reader import iter_fields
from tests.e2e.conftest import daemon_pids, finished, kill_all
from tests.e2e.test_forks import exec_args
from tests.e2e.test_profile import (assert_sites, profile_attached, read_line_containing,
                                    single_process)
from tests.e2e.trace_check import read_dumps, totals_by_leaf_function


def leftovers(device_root):
    """What a session may leave on the emulated device: daemon logs, its socket, traces."""
    found = list((device_root / "data" / "local" / "tmp").glob("droidheapd.*"))
    found += list((device_root / "data" / "misc" / "perfetto-traces").iterdir())
    socket = device_root / "dev" / "socket" / "heapprofd"
    return found + [socket] if socket.exists() else found


def test_a_session_leaves_nothing_on_the_device_and_keeps_the_daemon_log(
        cli, alloc_program, device_root, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "4096", "-o", out, "--", alloc_program)
    assert result.returncode == 0, result.stderr
    assert leftovers(device_root) == []
    log = (out / "droidheapd.log").read_text()
    assert "droidheapd: listening" in log and "droidheapd: stopped" in log, log


def test_app_goes_on_when_the_daemon_dies_mid_session(cli, alloc_program, device_root, tmp_path):
    go = tmp_path / "go"
    program = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
    session = None
    try:
        pid = int(program.stdout.readline().split("=")[1])
        session = cli.start("--local", "-p", pid, "-o", tmp_path / "out", "-i", "1", "-c", "50")
        assert "attached to pid" in session.stderr.readline()
        time.sleep(0.5)  # some periodic dumps are written first
        daemons = daemon_pids(device_root)
        assert daemons
        for daemon in daemons:
            os.kill(daemon, signal.SIGKILL)
        go.touch()
        # Every allocation after the daemon's death must still succeed, without blocking.
        assert program.wait(timeout=60) == 0
        assert "done" in program.stdout.read()
        _, stderr = finished(session, 60)
    finally:
        kill_all(program, session)
    assert session.returncode != 0
    assert "droidheapd was killed by signal 9" in stderr, stderr
    assert "Traceback" not in stderr
    # The dumps it wrote are converted; its socket is removed, its log kept with the outputs.
    assert list((tmp_path / "out").glob("heap_dump.*.pb.gz")), stderr
    assert leftovers(device_root) == []
    assert "droidheapd: listening" in (tmp_path / "out" / "droidheapd.log").read_text()


def wait_for_no_daemon(device_root, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while daemon_pids(device_root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon_pids(device_root) == []


def test_a_killed_droidheap_leaves_its_dumps_for_pull(cli, alloc_program, device_root, tmp_path):
    session = cli.start("--local", "-o", tmp_path / "first", "-i", "1", "-c", "200", "--",
                        alloc_program, "--linger", "2000")
    try:
        read_line_containing(session.stdout, "done", 60)
        session.send_signal(signal.SIGKILL)  # droidheap alone; the program goes on
        session.wait()
        # The daemon's lifeline closed with it: it writes a last dump and stops, as on a phone.
        wait_for_no_daemon(device_root)
    finally:
        kill_all(session)
    # The next run says so; `droidheap pull` collects it.
    second = cli.run("--local", "-i", "4096", "-o", tmp_path / "second", "--", alloc_program)
    assert second.returncode == 0, second.stderr
    assert "an earlier session's trace is still on the device" in second.stderr, second.stderr
    pulled = cli.run("--local", "pull", "-o", tmp_path / "pulled")
    assert pulled.returncode == 0, pulled.stderr
    (trace_out,) = (tmp_path / "pulled").iterdir()
    assert trace_out.name.startswith("droidheap-")
    assert list(trace_out.glob("heap_dump.*.pb.gz"))
    # The program had made every allocation before droidheap died: its last dump holds them all.
    assert_sites(single_process(totals_by_leaf_function(trace_out / "raw-trace", alloc_program)), 1)
    assert leftovers(device_root) == []
    again = cli.run("--local", "pull", "-o", tmp_path / "again")
    assert again.returncode == 0 and "no trace left on" in again.stderr, again.stderr


def cut_inside_a_packet(data: bytes, near: int) -> int:
    """Where to cut the trace `data` so that its packet at offset `near` is torn: a cut that fell
    on a packet's end would leave an intact, shorter trace."""
    start = 0
    for _, _, _, end in iter_fields(data):
        if end > near:
            return start + (end - start) // 2
        start = end
    raise AssertionError(f"the trace ends before offset {near}")


def test_pull_keeps_the_intact_dumps_of_a_truncated_trace(cli, alloc_program, device_root,
                                                          tmp_path):
    """A trace cut short (its daemon killed while writing, the device out of space)."""
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "-c", "100", "--", alloc_program,
                     "--linger", "1000")
    assert result.returncode == 0, result.stderr
    data = (out / "raw-trace").read_bytes()
    (dumps,) = read_dumps(out / "raw-trace").values()
    cut = device_root / "data" / "misc" / "perfetto-traces" / "droidheap-1.trace"
    cut.write_bytes(data[:cut_inside_a_packet(data, len(data) * 2 // 3)])
    pulled = cli.run("--local", "pull", "-o", tmp_path / "pulled")
    assert pulled.returncode == 0, pulled.stderr
    assert "the trace ends in a truncated or corrupt packet" in pulled.stdout + pulled.stderr
    kept = list((tmp_path / "pulled" / "droidheap-1").glob("heap_dump.*.pb.gz"))
    assert 1 <= len(kept) < len(dumps)
    assert leftovers(device_root) == []


def test_pull_with_nothing_left_and_a_busy_device(cli, alloc_program, device_root, tmp_path):
    result = cli.run("--local", "pull")
    assert result.returncode == 0 and "no trace left on" in result.stderr, result.stderr
    go = tmp_path / "go"
    session = cli.start("--local", "-o", tmp_path / "out", "--", alloc_program, "--wait-file", go)
    try:
        read_line_containing(session.stdout, "waiting pid=", 30)
        busy = cli.run("--local", "pull")
        go.touch()
        assert session.wait(timeout=120) == 0
    finally:
        kill_all(session)
    assert busy.returncode != 0
    assert busy.stderr.strip().splitlines() == [
        f"droidheap: another droidheap session is using the emulated device at {device_root} "
        f"({cli.abi}): one session at a time attaches to its processes (a program droidheap "
        f"starts, -- CMD, runs on a device root of its own)"], busy.stderr


def test_two_sessions_that_start_their_programs_run_at_once(cli, alloc_program, device_root,
                                                           tmp_path):
    """The README's demo while another --local session runs: the second takes a device root of
    its own, profiles its program exactly, and leaves nothing there."""
    go = tmp_path / "go"
    first = cli.start("--local", "-o", tmp_path / "first", "--", alloc_program, "--wait-file", go)
    try:
        read_line_containing(first.stdout, "waiting pid=", 30)
        second = cli.run("--local", "-o", tmp_path / "second", "-i", "1", "--", alloc_program)
        go.touch()
        assert first.wait(timeout=120) == 0
    finally:
        kill_all(first)
    assert second.returncode == 0, second.stderr
    assert (f"note: another droidheap session is using the emulated device at {device_root}: "
            f"this one runs at {tempfile.gettempdir()}/droidheap-device-") in second.stderr
    assert_sites(single_process(totals_by_leaf_function(tmp_path / "second" / "raw-trace",
                                                        alloc_program)), 1)
    assert (tmp_path / "first" / "raw-trace").is_file()
    assert list((device_root / "runs").iterdir()) == []


def test_a_program_that_closes_the_profilers_socket_is_left_alone(cli, programs, tmp_path):
    """The program closes every descriptor and reuses the numbers for sockets of its own: the
    client must notice its socket is gone, not write into (or shut down) the program's."""
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", programs("fd_closer"))
    assert "foreign=0 broken=0" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stderr
    # What was recorded before the socket went is kept.
    per_function = single_process(totals_by_leaf_function(out / "raw-trace", programs("fd_closer")))
    assert per_function["site_before_close"].allocated == 1000 * 256


@pytest.mark.skipif(os.geteuid() != 0, reason="binding over /proc/PID/mem needs root")
def test_a_process_whose_mem_is_unreadable_is_profiled_from_its_stack_copies(
        cli, programs, abi, alloc_program, tmp_path):
    out = tmp_path / "out"
    pid = profile_attached(cli, [programs("mem_hidden"), *exec_args(abi, alloc_program)], out, 1)
    assert f"pid={pid} sent no readable /proc/{pid}/mem" in (out / "droidheapd.log").read_text()
    assert_sites(single_process(totals_by_leaf_function(out / "raw-trace", alloc_program)), 1)
