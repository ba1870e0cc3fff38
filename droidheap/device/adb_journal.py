"""A session's claim on an adb device, and the changes it made there, kept on the device itself so
that a later run can undo what a run that died left behind.

    /data/local/tmp/droidheap/session.lock   "HOST PID EPOCH" of the session's droidheap
    /data/local/droidheap/undo               one line per change root undoes: "root|shell COMMAND",
                                             written before the change is made
    /data/local/tmp/droidheap/undo           the same, for changes the shell user undoes, on a
                                             device whose adb shell is not root

`release()` runs the undo lines newest first and removes the journals: at the end of every
session (normal exit, Ctrl-C, SIGTERM, an exception). When droidheap itself is killed, the device
keeps them; the next run finds the lock stale -- no droidheapd runs, and the droidheap that took it
is gone (or it is a minute old) -- and repairs the device before it claims it.

Only lines droidheap wrote are ever run: what root runs comes from the directory only root can
write (adb_root_dir.py), checked before every read, never from /data/local/tmp, which the shell
user owns: there a line could have been written by any of its programs. So the journal kept
there is run only by the shell user, and holds only `shell` lines; on a device whose adb shell is
root (`adb root`) it is never run at all, and a line found there is reported, not run.

Owned by the AdbDevice of one CLI run; not thread-safe.
"""
import dataclasses
import itertools
import os
import re
import shlex
import socket
import time
from typing import Iterable, List, Sequence, Tuple

from droidheap.device.adb_root_dir import ROOT_DIR
from droidheap.errors import DroidheapError

PROFILER_DIR = "/data/local/tmp/droidheap"
TRACE_DIR = f"{PROFILER_DIR}/traces"
# Where perfetto writes the platform mode's traces: the one directory it may write on a user build,
# which the shell may not list: each session's trace is named in PLATFORM_TRACES until pulled.
PLATFORM_TRACE_DIR = "/data/misc/perfetto-traces"
PLATFORM_TRACES = f"{PROFILER_DIR}/platform-traces"
_LOCK = f"{PROFILER_DIR}/session.lock"
_SHELL_UNDO = f"{PROFILER_DIR}/undo"
_ROOT_UNDO = f"{ROOT_DIR}/undo"
_STALE_AFTER_S = 60
# What each undo command's status follows in the output of the script that runs a session's undo
# lines together (one round trip, where a line each took one: a phone's adb answers in tens of
# milliseconds, Android 10 under qemu-user in a quarter of a second).
_UNDONE = "droidheap-undone"
# What the script that makes root's changes (DeviceJournal.make) prints before each change, with
# its number, and when a change could not be noted: which failed, of one round trip's.
_CHANGE = "droidheap-change"
_NOT_NOTED = "droidheap-not-noted"
_NO_DIR = "droidheap-no-dir"  # what the lock's script prints when it cannot make the trace dir


@dataclasses.dataclass
class Change:
    """A change root makes on the device (a shell command line), how to undo it, and what to
    say when it fails; with `only_if` (a shell condition), made and noted only where that holds
    when its turn comes."""
    command: str
    undo: str
    what: str
    only_if: str = ""


class DeviceJournal:
    def __init__(self, device):
        self._device = device
        self._claimed = False
        self.repairs: List[str] = []  # what an earlier run had left, now undone or reported

    def claim(self) -> None:
        if self._device.facts.root is not None:
            # Before the lock: a directory root must not trust is refused with nothing to undo.
            self._device.root_dir.check(create=False)
        owner = f"{socket.gethostname()} {os.getpid()} {int(time.time())}"
        taken = self._device.run_script(f"mkdir -p {TRACE_DIR} || {{ echo {_NO_DIR}; exit 1; }}; "
                                        f"set -C; echo {shlex.quote(owner)} > {_LOCK}")
        if taken.stdout.strip() == _NO_DIR:
            reason = (taken.stderr.strip().splitlines() or ["failed"])[0]
            raise DroidheapError(f"cannot prepare {PROFILER_DIR} on {self._device.serial}: "
                                 f"{reason}")
        if taken.exit_code != 0:
            self._take_over_stale_lock()
            self._shell(f"echo {shlex.quote(owner)} > {_LOCK}", "cannot lock")
        self._claimed = True

    def _take_over_stale_lock(self) -> None:
        holder = self._device.run(["cat", _LOCK]).stdout.split()
        running = self._device.pidof("droidheapd")
        if running or not self._lock_abandoned(holder):
            raise DroidheapError(
                f"another droidheap session is using {self._device.serial}"
                + (f" (droidheapd pid {running[0]})" if running else "")
                + f"; if none is, remove {_LOCK} on the device")
        self._undo_all()
        self.repairs.append("undid the changes an earlier session left on the device")

    @staticmethod
    def _lock_abandoned(holder: List[str]) -> bool:
        if len(holder) != 3 or not holder[1].isdigit() or not holder[2].isdigit():
            return True  # unreadable: not a live session's
        host, pid, taken = holder[0], int(holder[1]), int(holder[2])
        # Windows' os.kill would not probe the pid (signal 0 is its Ctrl-C event): there the
        # lock's age alone tells.
        if host == socket.gethostname() and os.name == "posix":
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
        return time.time() - taken > _STALE_AFTER_S

    def record(self, undo_command: str, privileged: bool) -> None:
        """Notes how to undo a change, before making it: where only root can write when root will
        run it (all of them, when the adb shell is root's)."""
        line = shlex.quote(f"{'root' if privileged else 'shell'} {undo_command}")
        if privileged or self._shell_is_root():
            self._device.root_dir.make()
            result = self._device.run_privileged(f"echo {line} >> {_ROOT_UNDO}")
            if result.exit_code != 0:
                reason = (result.stderr.strip().splitlines() or ["failed"])[0]
                raise DroidheapError(f"cannot note a change in {ROOT_DIR} on "
                                     f"{self._device.serial}: {reason}")
        else:
            self._shell(f"echo {line} >> {_SHELL_UNDO}", "cannot note a change in")

    def make(self, changes: Sequence[Change]) -> None:
        """Makes root's `changes` in order, each noted before it is made, in one round trip:
        the first that fails (or cannot be noted) stops the rest and is raised, those before it
        noted and made. (A change and its note took two round trips, and each condition one: a
        root session's install made ten, each tens of milliseconds on a phone, a quarter of a
        second on Android 10 under qemu-user.)"""
        self._device.root_dir.make()
        steps = []
        for i, change in enumerate(changes):
            line = shlex.quote(f"root {change.undo}")
            step = (f"{{ echo {line} >> {_ROOT_UNDO} || {{ echo {_NOT_NOTED}; exit 1; }}; }}; "
                    f"{{ {change.command}; }} || exit 1")
            if change.only_if:
                step = f"if {change.only_if}; then {step}; fi"
            steps.append(f"echo {_CHANGE} {i}; {step}")
        result = self._device.run_privileged("; ".join(steps))
        if result.exit_code == 0:
            return
        reached = re.findall(rf"^{_CHANGE} (\d+)$", result.stdout, re.MULTILINE)
        failed = changes[min(int(reached[-1]), len(changes) - 1) if reached else 0]
        printed = [line for line in result.stdout.splitlines()
                   if not line.startswith((_CHANGE, _NOT_NOTED))]
        reason = (result.stderr.strip().splitlines() or printed
                  or [f"exit status {result.exit_code}"])[0]
        if re.search(rf"^{_NOT_NOTED}$", result.stdout, re.MULTILINE):
            raise DroidheapError(f"cannot note a change in {ROOT_DIR} on {self._device.serial}: "
                                 f"{reason}")
        raise DroidheapError(f"{failed.what}: {reason}")

    def _shell_is_root(self) -> bool:
        return self._device.facts.root == "adbd"

    def release(self) -> None:
        if not self._claimed:
            return
        self._claimed = False
        try:
            self._undo_all(then=f"rm -f {_LOCK}")
        except BaseException:
            self._device.run(["rm", "-f", _LOCK])
            raise

    def _undo_all(self, then: str = ":") -> None:
        """Undoes what the journals hold, newest first, and removes them; `then`: a shell user's
        command run after that, in the last round trip."""
        failures = []
        if self._device.facts.root is not None and self._device.root_dir.check(create=False):
            lines = self._device.run_privileged(f"cat {_ROOT_UNDO} 2>/dev/null").stdout
            failures += self._undo([line.partition(" ")[::2]
                                    for line in reversed(lines.splitlines())],
                                   then=("root", f"rm -f {_ROOT_UNDO}"))
        ignored, undo = [], []
        for line in reversed(self._device.run(["cat", _SHELL_UNDO]).stdout.splitlines()):
            who, _, command = line.partition(" ")
            if who != "shell" or self._shell_is_root():
                ignored.append(line)  # not droidheap's: it journals these where root writes
            else:
                undo.append((who, command))
        failures += self._undo(undo, then=("shell", f"rm -f {_SHELL_UNDO}; {then}"))
        if ignored:
            self.repairs.append(
                f"warning: {_SHELL_UNDO} on {self._device.serial}, which the shell user can "
                f"write, held {len(ignored)} line(s) droidheap never journals there, not run "
                f"(the first: {ignored[0][:80]!r})")
        if failures:
            raise DroidheapError(f"could not undo on {self._device.serial}: {'; '.join(failures)}")

    def _undo(self, lines: Iterable[Tuple[str, str]], then: Tuple[str, str]) -> List[str]:
        """Runs the (root or shell, command) `lines` in their order, each consecutive run of one
        user's in one script, every command in a subshell of its own and on to the next whatever
        its status; last, `then`'s (user, command), in the last script when it is its user's.
        Returns the commands of `lines` that failed."""
        failures = []
        runs = [(who, [command for _, command in run])
                for who, run in itertools.groupby(lines, key=lambda line: line[0])]
        if not runs or runs[-1][0] != then[0]:
            runs.append((then[0], []))
        for i, (who, commands) in enumerate(runs):
            script = "".join(f'({command}) </dev/null; echo " {_UNDONE} $?"; '
                             for command in commands)
            if i == len(runs) - 1:
                script += then[1]
            run = self._device.run_privileged if who == "root" else self._device.run_script
            statuses = re.findall(rf" {_UNDONE} (\d+)$", run(script).stdout, re.MULTILINE)
            failures += [command for n, command in enumerate(commands)
                         if n >= len(statuses) or statuses[n] != "0"]
        return failures

    def _shell(self, script: str, what: str) -> None:
        result = self._device.run_script(script)
        if result.exit_code != 0:
            reason = (result.stderr.strip().splitlines() or ["failed"])[0]
            raise DroidheapError(f"{what} {PROFILER_DIR} on {self._device.serial}: {reason}")
