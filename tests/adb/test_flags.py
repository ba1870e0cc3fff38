"""heap_profile's flags that change which processes and heaps a session takes, through a real adb
server and the test adbd in both modes (root, preload): --all, fork teardown and
--disable-fork-teardown, --all-heaps; each as tests/e2e tests it on --local."""
import signal

import pytest

from droidheap.device.local import host_abi
from tests.e2e.conftest import compile_program, kill_all
from tests.e2e.test_forks import BLOCKS, CHILD_BYTES, pids_of
from tests.e2e.test_heaps import ROUNDS, assert_exact_totals, last_dumps
from tests.e2e.test_profile import assert_sites, read_line_containing
from tests.e2e.trace_check import totals_by_leaf_function

from .conftest import DEVICE_PROGRAM, ROOT, kill_device_program


def push_program(cli, name: str, tmp_path):
    """tests/programs/<name>.c built for the device, pushed to /data/local/tmp: (local, remote)."""
    program = compile_program(ROOT / "tests" / "programs" / f"{name}.c", tmp_path / name,
                              host_abi())
    remote = f"/data/local/tmp/{name}"
    cli.adb_server.adb("-s", cli.serial, "push", str(program), remote)
    return program, remote


def test_all_profiles_every_bionic_process_running_and_starting_where_root_allows(
        cli, device, local_program, tmp_path):
    """--all: root signals every running process on bionic's libc (found by its maps and its
    handler for the profiling signal, not by name) and sets heapprofd.enable=all for those that
    start; preload reaches only what droidheap started, and only while it runs."""
    out = tmp_path / "out"
    go = "/data/local/tmp/go-all"
    cli.shell(f"rm -f {go}")
    running = cli.start("shell", "--", DEVICE_PROGRAM, "--wait-file", go)
    session = started = None
    pids = {}
    try:
        pids["running"] = int(read_line_containing(running.stdout, "waiting pid=", 30)
                              .split("=")[1])
        session = cli.start("--all", "-i", "1", "-o", out)
        if device[1] == "root":
            read_line_containing(session.stderr, "from the start of each new process", 30)
            assert cli.shell("getprop heapprofd.enable").strip() == "all"
        read_line_containing(session.stderr, f"attached to pid {pids['running']}", 30)
        started = cli.start("shell", "--", DEVICE_PROGRAM, "--wait-file", go)
        pids["started"] = int(read_line_containing(started.stdout, "waiting pid=", 30)
                              .split("=")[1])
        if device[1] == "root":
            read_line_containing(session.stderr, f"profiling pid {pids['started']} from its "
                                                 f"start", 30)
        cli.shell(f"touch {go}")
        assert running.wait(timeout=60) == 0 and started.wait(timeout=60) == 0
        if device[1] == "root":  # it waits for more processes until Ctrl-C
            session.send_signal(signal.SIGINT)
        _, stderr = session.communicate(timeout=120)
        assert session.returncode == 0, stderr
    finally:
        cli.shell(f"touch {go}")
        kill_all(running, started, session)
        for pid in pids.values():
            kill_device_program(pid)
    per_pid = totals_by_leaf_function(out / "raw-trace", local_program)
    profiled = {"running", "started"} if device[1] == "root" else {"running"}
    assert {pid for pid, sites in per_pid.items() if "site_leak_malloc" in sites} == \
        {pids[which] for which in profiled}, (per_pid.keys(), pids)
    for which in profiled:
        assert_sites(per_pid[pids[which]], 1)
    cli.assert_left_as_it_was()


@pytest.mark.parametrize("teardown", [True, False])
def test_a_forked_child_is_torn_down_or_profiled_as_its_own(cli, device, tmp_path, teardown):
    """As on --local (tests/e2e/test_forks.py): by default a forked child leaves its parent's
    profile; --disable-fork-teardown makes it a process of its own, connecting to the daemon
    through whichever route its parent came by."""
    program, remote = push_program(cli, "fork_exec", tmp_path)
    out = tmp_path / "out"
    flags = [] if teardown else ["--disable-fork-teardown"]
    result = cli.run("-i", "1", *flags, "-o", out, "--", remote, "fork")
    assert result.returncode == 0, result.stderr
    parent, child = pids_of(result.stdout)
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert set(per_pid) == ({parent} if teardown else {parent, child}), per_pid.keys()
    assert per_pid[parent]["parent_after_fork"].allocated == BLOCKS * 5000
    assert "child_allocation" not in per_pid[parent]
    if not teardown:
        assert per_pid[child]["child_allocation"].allocated == CHILD_BYTES
        assert "parent_before_fork" not in per_pid[child]
    cli.assert_left_as_it_was()


def test_custom_heaps_get_their_pprof_and_exact_totals(cli, device, tmp_path):
    """droidheap/heaps.h in a program on the device: its registry is found whichever route
    loaded the client, and each heap gets its pprof and exact totals; the dump carries the
    process's RSS, read on the device."""
    _, remote = push_program(cli, "custom_heap", tmp_path)
    out = tmp_path / "out"
    result = cli.run("--all-heaps", "-i", "1", "-o", out, "--", remote, str(ROUNDS))
    assert result.returncode == 0, result.stderr
    pid, dumps = last_dumps(out)
    assert set(dumps) == {"libc.malloc", "pool", "arena"}, dumps.keys()
    for heap in ("pool", "arena"):
        assert_exact_totals(dumps[heap], result.stdout)
        assert (out / f"heap_dump.0.{pid}.{heap}.pb.gz").is_file()
    assert "the process as it exited: RSS " in result.stdout, result.stdout
    cli.assert_left_as_it_was()
