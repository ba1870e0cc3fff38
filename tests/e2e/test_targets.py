"""Which processes a session profiles, through the emulator device: `-n` takes those running and
those that start during the session (bionic's heapprofd.enable.<name> route, as heapprofd's
startup profiling), `--all` every process on the device likewise (heapprofd.enable=all),
`--no-running` and `--no-startup` keep one route each; `-d` ends a spawned
session while its program goes on."""
import signal

import pytest

from tests.e2e.conftest import finished, kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing
from tests.e2e.trace_check import totals_by_leaf_function


@pytest.mark.parametrize("target, flag, profiled", [
    ("-n", None, {"running", "started"}),
    ("-n", "--no-running", {"started"}),
    ("-n", "--no-startup", {"running"}),
    ("--all", None, {"running", "started"}),
    ("--all", "--no-running", {"started"}),
])
def test_running_and_starting_processes_are_taken_unless_told(cli, alloc_program, tmp_path,
                                                              target, flag, profiled):
    go = tmp_path / "go"
    out = tmp_path / "out"
    running = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
    session = started = None
    try:
        pids = {"running": int(read_line_containing(running.stdout, "waiting pid=", 30)
                               .split("=")[1])}
        targets = ["-n", alloc_program.name] if target == "-n" else ["--all"]
        session = cli.start("--local", *targets, "-i", "1", "-o", out, *([flag] if flag else []))
        # Once the session says how it goes on, its daemon listens and the route is set.
        read_line_containing(session.stderr, "from the start of each new process" if flag !=
                             "--no-startup" else f"attached to pid {pids['running']}", 30)
        started = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
        pids["started"] = int(read_line_containing(started.stdout, "waiting pid=", 30)
                              .split("=")[1])
        if "started" in profiled:
            read_line_containing(session.stderr, f"profiling pid {pids['started']} from its "
                                                 f"start", 30)
        go.touch()
        assert running.wait(timeout=60) == 0
        assert started.wait(timeout=60) == 0
        if flag != "--no-startup":  # it waits for more processes named so until Ctrl-C
            session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(running, started, session)
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    assert set(per_pid) == {pids[which] for which in profiled}, (per_pid.keys(), pids)
    for which in profiled:
        # Exact: the started one from its first allocation, the running one since it attached.
        assert_sites(per_pid[pids[which]], 1)


def test_duration_ends_a_spawned_session_and_the_program_goes_on(cli, alloc_program, tmp_path):
    go = tmp_path / "go"
    out = tmp_path / "out"
    session = cli.start("--local", "-d", "1500", "-i", "1", "-o", out, "--",
                        alloc_program, "--wait-file", go)
    try:
        read_line_containing(session.stderr, "stopped profiling after 1500 ms", 60)
        go.touch()  # the program's sites come after the profile has ended
        read_line_containing(session.stdout, "done", 60)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(session)
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    assert len(per_pid) == 1, per_pid.keys()
    per_function = next(iter(per_pid.values()))
    assert "heartbeat" in per_function
    assert "site_leak_malloc" not in per_function, per_function.keys()


def test_a_spawned_program_is_profiled_alone_not_others_of_its_name(cli, alloc_program, tmp_path):
    go = tmp_path / "go"
    out = tmp_path / "out"
    session = cli.start("--local", "-i", "1", "-o", out, "--", alloc_program, "--wait-file", go)
    other = None
    try:
        spawned = int(read_line_containing(session.stdout, "waiting pid=", 60).split("=")[1])
        # Started while the session's start property names alloc_sites: it reads it too.
        other = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
        other_pid = int(read_line_containing(other.stdout, "waiting pid=", 30).split("=")[1])
        go.touch()
        assert other.wait(timeout=60) == 0
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(session, other)
    log = (out / "droidheapd.log").read_text()
    assert f"rejected pid={other_pid}" in log, log
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    assert set(per_pid) == {spawned}, (per_pid.keys(), spawned, other_pid)
    assert_sites(per_pid[spawned], 1)


def test_a_name_no_process_had_is_an_error_not_an_empty_profile(cli, tmp_path):
    out = tmp_path / "out"
    result = cli.run("--local", "-n", "no_such_program", "-d", "500", "-o", out)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "droidheap: no process named no_such_program ran during the session"), result.stderr
    assert (out / "raw-trace").is_file()  # what was written is kept


def test_a_pattern_takes_the_running_processes_it_matches(cli, alloc_program, tmp_path):
    """-n with a glob pattern, as heapprofd's process_cmdline takes one: the running processes
    whose names it matches, and (bionic looking a starting program up by its exact name) not
    those that start later, so the session ends with them."""
    go = tmp_path / "go"
    out = tmp_path / "out"
    running = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
    session = None
    try:
        pid = int(read_line_containing(running.stdout, "waiting pid=", 30).split("=")[1])
        session = cli.start("--local", "-n", alloc_program.name[:5] + "*", "-i", "1", "-o", out)
        read_line_containing(session.stderr, "a pattern takes the running processes it matches, "
                                             "not those that start later", 30)
        read_line_containing(session.stderr, f"attached to pid {pid}", 30)
        go.touch()
        assert running.wait(timeout=60) == 0
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(running, session)
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    assert set(per_pid) == {pid}, per_pid.keys()
    assert_sites(per_pid[pid], 1)


def test_a_pattern_nothing_running_matches_is_an_error(cli, tmp_path):
    result = cli.run("--local", "-n", "no_such_prog*", "-o", tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("droidheap: no running process on ") and \
        "no_such_prog* matches" in result.stderr and len(result.stderr.splitlines()) == 1, \
        result.stderr
