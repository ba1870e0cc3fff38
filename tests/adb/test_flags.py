"""--all through a real adb server and the emulation-layer device in both modes (root, preload),
as tests/e2e tests it on --local: which processes each mode reaches. Fork teardown and
--all-heaps run on real bionic (test_android_flags.py), root's --all on it too
(test_android_sessions.py)."""
import signal

from tests.e2e.conftest import finished, kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing
from tests.e2e.trace_check import totals_by_leaf_function

from .conftest import DEVICE_PROGRAM, ONE_ADB_SERVER, kill_device_program

pytestmark = ONE_ADB_SERVER  # what each mode reaches, whichever server carries the session


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
        _, stderr = finished(session, 120)
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
