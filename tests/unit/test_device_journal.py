"""The undo journal (droidheap/device/adb_journal.py): root's changes noted and made in one
round trip, each noted before it is made; the undo lines run together, each in its user's script,
in order, on past a failure, and each failure named. Run by this machine's sh in place of a
device's (tests/adb/ runs them on the test devices)."""
import subprocess
import types

import pytest

from droidheap.device import adb_journal
from droidheap.device.adb import ShellResult
from droidheap.device.adb_journal import Change, DeviceJournal
from droidheap.errors import DroidheapError


class ThisMachinesShell:
    """The part of an AdbDevice the journal's undo uses: each script run by /bin/sh, noted with
    the user it ran as."""

    serial = "sh"

    def __init__(self):
        self.scripts = []
        self.root_dir = types.SimpleNamespace(make=lambda: None)

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
    failures = journal._undo(lines, then=("root", f"echo then >> {log}"))
    assert failures == ["false", "exit 3"]
    assert log.read_text().split() == ["1", "2", "3", "4", "then"]
    assert device.scripts == ["root", "shell", "root"]  # a script per run of one user's lines
    # Another user's `then`, or one with no lines: a round trip of its own.
    assert journal._undo(lines[:1], then=("shell", f"echo then >> {log}")) == []
    assert journal._undo([], then=("root", f"echo alone >> {log}")) == []
    assert log.read_text().split()[-3:] == ["1", "then", "alone"]
    assert device.scripts[3:] == ["root", "shell", "root"]


@pytest.fixture
def root_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(adb_journal, "_ROOT_UNDO", str(tmp_path / "undo"))
    return tmp_path / "undo"


def test_changes_are_noted_before_each_is_made_in_one_round_trip(tmp_path, root_journal):
    state = tmp_path / "state"
    device = ThisMachinesShell()
    DeviceJournal(device).make([
        # Each change finds its note already written.
        Change(f"cp {root_journal} {state}", "undo-1", "cannot copy"),
        Change("echo never", "undo-never", "skipped", only_if="false"),
        Change(f"echo made >> {state}", "undo-2", "cannot append", only_if=f"[ -e {state} ]"),
    ])
    assert device.scripts == ["root"]
    assert root_journal.read_text().splitlines() == ["root undo-1", "root undo-2"]
    assert state.read_text().splitlines() == ["root undo-1", "made"]


def test_the_first_change_that_fails_stops_the_rest_and_is_named(tmp_path, root_journal):
    device = ThisMachinesShell()
    with pytest.raises(DroidheapError, match="^cannot stop it: it will not stop$"):
        DeviceJournal(device).make([
            Change("true", "undo-1", "cannot start"),
            Change("echo 'it will not stop' >&2; false", "undo-2", "cannot stop it"),
            Change(f"touch {tmp_path / 'never'}", "undo-3", "cannot touch"),
        ])
    # What failed is noted too: its undo runs whatever part of it was made.
    assert root_journal.read_text().splitlines() == ["root undo-1", "root undo-2"]
    assert not (tmp_path / "never").exists()


def test_a_change_that_cannot_be_noted_is_not_made(tmp_path, monkeypatch):
    monkeypatch.setattr(adb_journal, "_ROOT_UNDO", str(tmp_path / "absent" / "undo"))
    with pytest.raises(DroidheapError, match="^cannot note a change in /data/local/droidheap on "
                                             "sh: .*absent/undo"):
        DeviceJournal(ThisMachinesShell()).make([
            Change(f"touch {tmp_path / 'made'}", "undo", "cannot touch")])
    assert not (tmp_path / "made").exists()
