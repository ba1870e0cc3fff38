"""Forks and execs, through the emulator device (tests/programs/fork_exec.c). A forked child leaves
its parent's profile at the fork: its calls never reach the parent's samples or exact totals; with
--disable-fork-teardown it is profiled as a process of its own from the fork on. A vfork child is
left alone, its parent's profile goes on. A child that execs a program the session names, or any
program when it descends from the spawned one, is profiled from that program's start."""
import re
import shutil
import signal
import subprocess

import pytest

from droidheap.device.local import QEMU_SYSROOTS
from droidheap.native import host_abi
from droidheap.trace.heap_dumps import rebuild_dumps
from droidheap.trace.reader import parse_trace
from tests.e2e.conftest import PROGRAMS, compiler, finished, kill_all
from tests.e2e.test_profile import assert_sites, read_line_containing
from tests.e2e.trace_check import totals_by_leaf_function
from tests.trace_processor import LoadedTrace

BLOCKS = 100
PARENT_BYTES = BLOCKS * (1000 + 5000)  # parent_before_fork, parent_after_fork
CHILD_BYTES = BLOCKS * 3000            # child_allocation
# Usable sizes round each block up a little; stdio's buffer and the like come on top.
SLACK = 64 * 1024


def pids_of(stdout: str):
    child = int(re.search(r"child pid=(\d+)", stdout).group(1))
    parent = int(re.search(r"parent pid=(\d+) child exited 0", stdout).group(1))
    return parent, child


def exec_args(abi: str, program) -> list:
    """What a process on the emulated device execs to run `program`: qemu-user runs no foreign
    binary an emulated program execs, so under it the launcher comes first."""
    if abi == host_abi():
        return [program]
    qemu, sysroot = QEMU_SYSROOTS[abi]
    return [shutil.which(qemu), "-L", sysroot, program]


def exact_totals(out):
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps
    return {pid: process_dumps[-1].totals for pid, process_dumps in dumps.items()}


def test_forked_child_leaves_the_parents_samples_and_totals(cli, programs, tmp_path):
    program = programs("fork_exec")
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "-o", out, "--", program, "fork")
    assert result.returncode == 0, result.stderr
    parent, _ = pids_of(result.stdout)
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert set(per_pid) == {parent}, per_pid.keys()
    sites = per_pid[parent]
    assert sites["parent_before_fork"].allocated == BLOCKS * 1000
    assert sites["parent_after_fork"].allocated == BLOCKS * 5000
    assert "child_allocation" not in sites, sites.keys()
    totals = exact_totals(out)[parent]
    assert PARENT_BYTES <= totals.alloc_bytes < PARENT_BYTES + SLACK, totals


def test_disable_fork_teardown_profiles_the_child_as_its_own(cli, programs, tmp_path):
    program = programs("fork_exec")
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "--disable-fork-teardown", "-o", out, "--", program,
                     "fork")
    assert result.returncode == 0, result.stderr
    parent, child = pids_of(result.stdout)
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert set(per_pid) == {parent, child}, per_pid.keys()
    assert "child_allocation" not in per_pid[parent]
    assert per_pid[child]["child_allocation"].allocated == CHILD_BYTES
    # From the fork on: what the parent allocated before is not the child's.
    assert "parent_before_fork" not in per_pid[child]
    totals = exact_totals(out)
    assert PARENT_BYTES <= totals[parent].alloc_bytes < PARENT_BYTES + SLACK
    # The child frees its copies of the parent's blocks: its frees are no count of what it
    # allocated since the fork (as an attached process's, test_attach_totals.py), so no figure of
    # what is in use is made from them. Its allocations since the fork are exact.
    assert totals[child] is None, totals[child]
    with LoadedTrace(out / "symbolized-trace") as trace:
        counters = {r["name"]: r["value"] for r in trace.rows(
            "select t.name, c.value from counter c join process_counter_track t "
            "on c.track_id = t.id join process p using (upid) "
            f"where p.pid = {child} and t.name glob 'libc.malloc: *'")}
    assert CHILD_BYTES <= counters["libc.malloc: allocated bytes"] < CHILD_BYTES + SLACK, counters
    assert counters["libc.malloc: freed bytes (older blocks too)"] >= BLOCKS * 1000, counters


def test_vfork_child_is_left_alone(cli, programs, tmp_path):
    program = programs("fork_exec")
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "-o", out, "--", program, "vfork", shutil.which("echo"),
                     "vforked")
    assert result.returncode == 0, result.stderr
    assert "vforked" in result.stdout  # the program the child ran
    parent = int(re.search(r"parent pid=(\d+) child exited 0", result.stdout).group(1))
    per_pid = totals_by_leaf_function(out / "raw-trace", program)
    assert per_pid[parent]["parent_after_fork"].allocated == BLOCKS * 5000
    # The program it execs (echo, when it allocates at all) is profiled from its start, as the
    # spawned program's every descendant: a process of its own, nothing of fork_exec's in it.
    assert len(per_pid) <= 2 and all("parent_after_fork" not in sites and "child_allocation"
                                     not in sites for pid, sites in per_pid.items()
                                     if pid != parent), per_pid


def test_child_exec_of_a_named_program_is_profiled_from_its_start(cli, abi, programs,
                                                                  alloc_program, tmp_path):
    program = programs("fork_exec")
    out = tmp_path / "out"
    session = launcher = None
    try:
        session = cli.start("--local", "-n", f"{program.name},{alloc_program.name}",
                            "--no-running", "-i", "1", "-o", out)
        read_line_containing(session.stderr, "from the start of each new process", 30)
        launcher = cli.start("--local", "shell", "--", program, "fork",
                             *exec_args(abi, alloc_program))
        stdout, _ = finished(launcher, 120, "the launcher")
        assert launcher.returncode == 0
        parent, child = pids_of(stdout)
        read_line_containing(session.stderr, f"profiling pid {child} from its start", 30)
        session.send_signal(signal.SIGINT)
        _, stderr = finished(session, 120)
        assert session.returncode == 0, stderr
    finally:
        kill_all(launcher, session)
    assert "child_allocation" not in totals_by_leaf_function(out / "raw-trace", program)[parent]
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    assert_sites(per_pid[child], 1)


def test_raw_clone_child_stays_out_of_the_totals(cli, abi, programs, tmp_path):
    """tests/programs/fork_child.c: a fork() child and a raw clone() child, which runs no atfork
    handler, allocate 100 x 3000 and 100 x 7000 bytes."""
    program = programs("fork_child")
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", program)
    assert result.returncode == 0, result.stderr
    (totals,) = exact_totals(out).values()
    assert PARENT_BYTES <= totals.alloc_bytes, totals
    # The raw clone child is told apart without a system call only where the kernel wipes a page
    # in a child (MADV_WIPEONFORK): not under qemu-user, whose calls it then counts.
    raw_clone = 0 if abi == host_abi() else BLOCKS * 7000 + SLACK
    assert totals.alloc_bytes < PARENT_BYTES + SLACK + raw_clone, totals


def test_what_the_spawned_program_execs_is_profiled_too(cli, abi, alloc_program, tmp_path):
    """`-- sh -c 'prog | cat'`, `-- env X=1 prog`: the programs a spawned wrapper or shell runs
    are its descendants, each profiled from its start (the emulated device's programs all load
    the client for the session, and droidheapd takes the spawned program's descendants alone)."""
    if abi != host_abi():
        pytest.skip("the host's sh and env run no program of another ABI")
    out = tmp_path / "out"
    script = f"{alloc_program} | cat >/dev/null; exec env X=1 {alloc_program}"
    result = cli.run("--local", "-i", "1", "-o", out, "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    per_pid = totals_by_leaf_function(out / "raw-trace", alloc_program)
    # The pipeline's, and the one env execs in the shell's own process; cat is profiled too.
    programs = [totals for totals in per_pid.values() if "site_leak_malloc" in totals]
    assert len(programs) == 2 and len(per_pid) == 3, per_pid.keys()
    for totals in programs:
        assert_sites(totals, 1)
    # The shell's forked copies, which exec'd what connected, are not programs that did not.
    assert "never connected" not in result.stderr, result.stderr


def test_a_program_the_spawned_one_ran_that_never_connected_is_named(cli, abi, tmp_path):
    """A statically linked program (no dynamic linker, so no client) that the spawned shell runs
    is named at the end, with why, rather than missed without a word."""
    if abi != host_abi():
        pytest.skip("the host's sh runs no program of another ABI")
    static = tmp_path / "alloc_static"
    subprocess.run([compiler(abi), "-static", "-O1", "-pthread", str(PROGRAMS / "alloc_sites.c"),
                    "-o", str(static)], check=True)
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "--", "sh", "-c", f"{static} --linger 400; true")
    assert result.returncode == 0, result.stderr
    assert "warning: 1 program that sh ran never connected (statically linked, a malloc of " \
        "their own, or no allocation): pid " in result.stderr, result.stderr
    assert "(alloc_static --linger 400)" in result.stderr, result.stderr


def test_a_forked_child_that_execs_ends_its_profile_as_exec_not_as_a_lost_connection(
        cli, abi, programs, alloc_program, tmp_path):
    """--disable-fork-teardown: the child, profiled as a process of its own, execs the program
    (its client's socket closes on exec). That profile ends "process exec'd"; the program it
    execs, the same pid, is profiled from its start."""
    program = programs("fork_exec")
    out = tmp_path / "out"
    result = cli.run("--local", "-i", "1", "--disable-fork-teardown", "-o", out, "--", program,
                     "fork", *exec_args(abi, alloc_program))
    assert result.returncode == 0, result.stderr
    parent, child = pids_of(result.stdout)
    dumps = rebuild_dumps(parse_trace((out / "raw-trace").read_bytes()).packets).dumps[child]
    assert [d.ending for d in dumps if d.disconnected] == ["process exec'd", "process exited"], \
        dumps
    assert f"process exec'd pid={child}" in (out / "droidheapd.log").read_text()
    assert_sites(totals_by_leaf_function(out / "raw-trace", alloc_program)[child], 1)
