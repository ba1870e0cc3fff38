"""Faults: whatever fails, the profiled program goes on unaffected, what was captured is kept and
the device is left as it was found."""
import os
import signal

from tests.e2e.conftest import daemon_pids, kill_all


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
        kill_all(program, session)
    assert session.returncode != 0
    assert "droidheapd was killed by signal 9" in stderr, stderr
    assert "Traceback" not in stderr
    # The dead daemon's socket is removed, its log kept with the outputs.
    assert leftovers(device_root) == []
    assert "droidheapd: listening" in (tmp_path / "out" / "droidheapd.log").read_text()
