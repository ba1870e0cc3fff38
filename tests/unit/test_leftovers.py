"""tests/leftovers.py: what a device test left running is found, named and killed; what it ended,
and programs that are not ours, are not."""
import shutil
import subprocess
import time

from droidheap.device.local_processes import host_pids, program_arguments
from tests import leftovers
from tests.leftovers import Leftovers


def _program(tmp_path):
    program = tmp_path / "lingering"
    shutil.copy(shutil.which("sleep"), program)
    return program


def _wait_until_running(program):
    """Once a process runs it (a child just forked still runs Python or the shell)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(program_arguments(pid)[:1] == [str(program)] for pid in host_pids()):
            return
        time.sleep(0.01)
    raise AssertionError(f"{program} never ran")


def test_a_program_of_ours_left_running_is_named_and_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers, "_GRACE_S", 0.2)
    found = Leftovers([str(tmp_path)])
    program = _program(tmp_path)
    lingering = subprocess.Popen([program, "60"])
    try:
        _wait_until_running(program)
        left = found.check()
        assert f"pid {lingering.pid} ({tmp_path}/lingering 60)" == left
        assert lingering.wait(timeout=5) == -9
    finally:
        lingering.kill()


def test_an_orphan_of_ours_is_named_too(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers, "_GRACE_S", 0.2)
    found = Leftovers([str(tmp_path)])
    # Its parent shell is gone before the check: it is init's (or a subreaper's) now.
    subprocess.run(["sh", "-c", f"'{_program(tmp_path)}' 60 >/dev/null 2>&1 &"], check=True)
    _wait_until_running(tmp_path / "lingering")
    assert "lingering 60" in found.check()


def test_what_ended_in_time_and_what_is_not_ours_are_not_named(tmp_path):
    found = Leftovers([str(tmp_path)])
    program = _program(tmp_path)
    ended = subprocess.Popen([program, "0.3"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        # Popen returns once the child is past exec's point of no return, its command line not
        # yet written: on a busy machine the check could miss it and return before it ended.
        _wait_until_running(program)
        began = time.monotonic()
        assert found.check() == ""
        assert ended.poll() is not None and time.monotonic() - began < 5
    finally:
        other.kill()
        other.wait()
