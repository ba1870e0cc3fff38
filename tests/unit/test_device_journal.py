"""The undo journal's lines run together (droidheap/device/adb_journal.py): each in its user's
script, in order, on past a failure, and each failure named. Run by this machine's sh in place of
a device's (tests/adb/ runs them on the test devices)."""
import subprocess

from droidheap.device.adb import ShellResult
from droidheap.device.adb_journal import DeviceJournal


class ThisMachinesShell:
    """The part of an AdbDevice the journal's undo uses: each script run by /bin/sh, noted with
    the user it ran as."""

    def __init__(self):
        self.scripts = []

    def run_script(self, script: str) -> ShellResult:
        return self._run("shell", script)

    def run_privileged(self, script: str) -> ShellResult:
        return self._run("root", script)

    def _run(self, user: str, script: str) -> ShellResult:
        self.scripts.append(user)
        done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                              timeout=60)
        return ShellResult(done.returncode, done.stdout, done.stderr)


def test_undo_runs_every_line_in_order_as_its_user_and_names_each_failure(tmp_path):
    log = tmp_path / "log"
    device = ThisMachinesShell()
    journal = DeviceJournal(device)
    lines = [("root", f"echo 1 >> {log}"), ("root", "false"),
             ("root", f"printf 'no newline'; echo 2 >> {log}"),
             ("shell", "exit 3"), ("shell", f"echo 3 >> {log}"), ("root", f"echo 4 >> {log}")]
    failures = journal._undo(lines)
    assert failures == ["false", "exit 3"]
    assert log.read_text().split() == ["1", "2", "3", "4"]
    assert device.scripts == ["root", "shell", "root"]  # a script per run of one user's lines
