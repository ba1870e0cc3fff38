"""The directory only root can write on a rooted device, /data/local/droidheap: what root runs
(droidheapd), what it mounts into every app (heapprofd_client.so, and lib32/'s) and the journal
of what root must undo (adb_journal.py) live there, never in /data/local/tmp/droidheap.

Why: /data/local/tmp belongs to the shell user, so any program of its (or what a preload session
left there) can replace a file there between droidheap's push and root's use of it, or add a
line to a journal root would run. /data/local is root's (0751 on a phone) and /data the system
user's: a directory root makes there stays root's.

    adb push (as the shell user, unless `adb root`)   -> /data/local/tmp/droidheap/NAME
    read by root, compared with the host's file       -> /data/local/droidheap/NAME

One root command checks the directory and its parents before a session first uses it, and
before every read of the root journal: each a directory (not a symlink), owned by root (or by
the system user, above it), writable by no one else; each copy is checked likewise. A directory
there that fails is refused, never repaired: root made it so, and only the device's owner knows
why. The root journal is read only after that check, which is enough without a host copy of it:
no one but root can have written it.

Owned by the AdbDevice of one CLI run, used from its thread; only on a device with root.
"""
import hashlib
import pathlib
import posixpath
import shlex
from typing import Dict, List, NamedTuple

from droidheap.errors import DroidheapError

ROOT_DIR = "/data/local/droidheap"
_PARENTS = ("/", "/data", "/data/local")
_SYSTEM_UIDS = (0, 1000)  # root, and the system user who owns /data
_STAT_FORMAT = "%u %g %a %F"  # toybox's stat has it as coreutils' does
# sha256sum where the device's toybox has it, md5sum where it has not: either tells the host's
# file from another a shell-user program put in its place (that needs a second preimage).
_HASHERS = (hashlib.sha256, hashlib.md5)
_NOT_PUSHED = "droidheap-not-what-was-pushed"
_COPY_MARKER = "droidheap-copy"  # then the copy's number: its answer follows
_DD_BLOCK = 4096  # dd's block: root reads a staged file's size rounded up to it, no more


class Copy(NamedTuple):
    """A file for root's directory: `local` on the host, pushed by the shell user to `staged`,
    copied to `relative` in the directory with `mode`."""
    local: pathlib.Path
    staged: str
    relative: str
    mode: int


class RootDirectory:
    def __init__(self, device):
        self._device = device
        self._checked = False  # found there and checked: only root can change it since

    def make(self) -> None:
        """Makes the directory if it is not there, checked. Once a session, and not after a
        check found it there: after the check, no one but root can change it."""
        if not self._checked:
            self.check(create=True)

    def check(self, create: bool) -> bool:
        """Whether the directory is there, after checking it and its parents (and making it, with
        `create`); DroidheapError when one of them could be written by someone but root."""
        q = shlex.quote
        make = f"[ -e {q(ROOT_DIR)} ] || [ -L {q(ROOT_DIR)} ] || mkdir -m 755 {q(ROOT_DIR)}; " \
            if create else ""
        result = self._device.run_privileged(
            f"{make}stat -c {q(_STAT_FORMAT)} {' '.join(map(q, _PARENTS))} && "
            f"if [ -e {q(ROOT_DIR)} ] || [ -L {q(ROOT_DIR)} ]; then "
            f"stat -c {q(_STAT_FORMAT)} {q(ROOT_DIR)}; else echo absent; fi")
        lines = result.stdout.splitlines()
        if result.exit_code != 0 or len(lines) != len(_PARENTS) + 1:
            reason = (result.stderr.strip().splitlines() or ["no answer from stat"])[0]
            raise DroidheapError(f"cannot check {ROOT_DIR} on {self._device.serial}: {reason}")
        for path, line in zip(_PARENTS, lines):
            self._check_line(path, line, "directory", _SYSTEM_UIDS)
        if lines[-1] == "absent":
            if create:
                reason = (result.stderr.strip().splitlines() or ["mkdir failed"])[0]
                raise DroidheapError(f"cannot make {ROOT_DIR} on {self._device.serial}: {reason}")
            return False  # nothing of droidheap's is there
        self._check_line(ROOT_DIR, lines[-1], "directory", (0,))
        self._checked = True
        return True

    def _check_line(self, path: str, line: str, kind: str, owners) -> None:
        words = line.split(" ", 3)
        try:
            uid, gid, mode = int(words[0]), int(words[1]), int(words[2], 8)
            found = words[3]
        except (ValueError, IndexError):
            raise DroidheapError(f"cannot check {path} on {self._device.serial}: "
                                 f"stat answered {line!r}") from None
        others_write = mode & 0o002 or (mode & 0o020 and gid not in _SYSTEM_UIDS)
        if found != kind or uid not in owners or others_write:
            what = "directory" if kind == "directory" else "file"
            raise DroidheapError(
                f"{path} on {self._device.serial} is not a {what} only root can write ({found}, "
                f"owner uid {uid}, gid {gid}, mode {mode:o}); droidheap will not use it: remove it "
                f"as root if nothing else needs it")

    def install(self, copies: List[Copy]) -> Dict[str, str]:
        """Copies each `staged` file (its `local` one, pushed by the shell user) as root to
        `relative` in the directory, checked, all in one round trip; returns {relative: the
        copy's path}.

        The shell user may have put anything at `staged` by then (a link to a file only root can
        read, to /dev/zero, a FIFO): root reads no more than `local`'s size from it, into a
        file only root can read, compares that with `local` before anything else happens to it,
        and then replaces the last copy, never rewriting it in place (an app may still map the
        last session's client). The first copy that fails ends the script, named."""
        q = shlex.quote
        parts, targets = ["umask 077"], []
        for number, copy in enumerate(copies):
            data = copy.local.read_bytes()
            target = f"{ROOT_DIR}/{copy.relative}"
            parent = posixpath.dirname(target)
            tmp = f"{parent}/.{posixpath.basename(target)}.new"
            expected = " ".join(h(data).hexdigest() for h in _HASHERS)
            # mkdir's -m sets the new directory's mode whatever the umask.
            parts.append(
                f"echo {_COPY_MARKER} {number}; mkdir -p -m 755 {q(parent)} && "
                f"dd if={q(copy.staged)} of={q(tmp)} bs={_DD_BLOCK} "
                f"count={len(data) // _DD_BLOCK + 1} "
                f"2>/dev/null || {{ echo {q('cannot read ' + copy.staged)}; exit 1; }}; "
                f"h=$(sha256sum {q(tmp)} 2>/dev/null || md5sum {q(tmp)}) && "
                f"case \" {expected} \" in *\" ${{h%% *}} \"*) ;; *) rm -f {q(tmp)}; "
                f"echo {_NOT_PUSHED}; exit 1;; esac && "
                f"chmod {copy.mode:o} {q(tmp)} && mv -f {q(tmp)} {q(target)} && "
                f"stat -c {q(_STAT_FORMAT)} {q(parent)} {q(target)} || exit 1")
            targets.append((parent, target))
        result = self._device.run_privileged("\n".join(parts))
        answers: List[List[str]] = []  # each copy's lines, after its marker
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == _COPY_MARKER and words[1] == str(len(answers)):
                answers.append([])
            elif answers:
                answers[-1].append(line)
        for copy, (parent, target), lines in zip(copies, targets, answers):
            if lines == [_NOT_PUSHED]:
                raise DroidheapError(
                    f"{copy.staged} on {self._device.serial} is not the {copy.relative} droidheap "
                    f"pushed there (a program of the shell user replaced it?): root will not run "
                    f"it")
            if len(lines) != 2:
                reason = (result.stderr.strip().splitlines() or lines or ["failed"])[-1]
                raise DroidheapError(f"cannot copy {copy.relative} into {ROOT_DIR} on "
                                     f"{self._device.serial}: {reason}")
            self._check_line(parent, lines[0], "directory", (0,))
            self._check_line(target, lines[1], "regular file", (0,))
        if result.exit_code != 0 or len(answers) != len(copies):
            reason = (result.stderr.strip().splitlines() or ["no answer"])[-1]
            raise DroidheapError(f"cannot copy droidheap's files into {ROOT_DIR} on "
                                 f"{self._device.serial}: {reason}")
        return {copy.relative: target for copy, (_, target) in zip(copies, targets)}
