"""The emulated bionic: hook routes, signals and fork behave as on a phone."""
import os
import pathlib
import signal
import subprocess
import time

from tests.e2e.conftest import daemon_pids
from tests.e2e.trace_check import totals_by_leaf_function

ROOT = pathlib.Path(__file__).resolve().parents[2]


def compile_program(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    out = tmp_path / name
    subprocess.run(["cc", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread",
                    str(ROOT / "tests" / "programs" / f"{name}.c"), "-o", str(out)], check=True)
    return out


def test_plain_kill_of_the_profiling_signal_is_ignored(cli, alloc_program, tmp_path):
    # bionic acts on signal 36 only when it comes from sigqueue (SI_QUEUE) with value 0.
    program = cli.start("--local", "shell", "--", alloc_program, "--wait-file", tmp_path / "go")
    try:
        line = program.stdout.readline()
        pid = int(line.split("=")[1])
        subprocess.run(["kill", "-36", str(pid)], check=True)
        time.sleep(0.3)
        assert program.poll() is None
        maps = pathlib.Path(f"/proc/{pid}/maps").read_text()
        assert "heapprofd_client.so" not in maps
        (tmp_path / "go").touch()
        assert program.wait(timeout=60) == 0
    finally:
        if program.poll() is None:
            program.send_signal(signal.SIGKILL)


def test_forked_child_is_not_profiled_and_parent_continues(cli, tmp_path):
    program = compile_program("fork_child", tmp_path)
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    assert "child status 0" in result.stdout
    totals = totals_by_leaf_function(out / "raw-trace", program)
    assert len(totals) == 1  # the child never connected
    per_function = next(iter(totals.values()))
    assert per_function["parent_before_fork"].allocated == 100 * 1000
    assert per_function["parent_after_fork"].allocated == 100 * 5000
    assert "child_allocation" not in per_function


def test_app_goes_on_when_the_daemon_dies_mid_session(cli, alloc_program, device_root, tmp_path):
    go = tmp_path / "go"
    program = cli.start("--local", "shell", "--", alloc_program, "--wait-file", go)
    session = None
    try:
        pid = int(program.stdout.readline().split("=")[1])
        session = cli.start("--local", "-p", pid, "-o", tmp_path / "out", "-i", "1")
        assert "attached to pid" in session.stderr.readline()
        daemons = daemon_pids(device_root)
        assert daemons
        for daemon in daemons:
            os.kill(daemon, signal.SIGKILL)
        go.touch()
        # Every allocation after the daemon's death must still succeed, without blocking.
        assert program.wait(timeout=60) == 0
        assert "done" in program.stdout.read()
        _, stderr = session.communicate(timeout=60)
    finally:
        for p in (program, session):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
    assert session.returncode != 0
    assert "droidheapd was killed by signal 9" in stderr, stderr
    assert "Traceback" not in stderr
