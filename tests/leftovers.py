"""What a test that runs programs on this machine (the this_machines_processes group) left running
when it ended: a later test that looks processes up by name (pidof, killall, --all, -n) would
find them, and that is how one failure became thirty on a slower machine. Checked after every
test of the group, a failed one too: what is left is killed, and the test fails naming it.

Ours are droidheap's own processes (the CLI, droidheapd on this machine or on a test device) and
the test programs (built in the worker's temporary directory, or pushed to a test device's
/data/local), by the program each runs, under qemu-user too, that this worker started (its
descendants, or orphans it may have left): the other worker's, which runs the native tests on the
same Android userlands at the same time, are not. What a test device runs for itself (its adbd,
its init's services, which a session stops and starts again) is not ours either."""
import os
import pathlib
import signal
import time
from typing import Dict, List, Tuple

from droidheap.device.local_processes import host_pids, program_arguments

# How long a process may take to go after its test ended (a killed one is reaped by its parent,
# a daemon told to stop writes its last dump first).
_GRACE_S = 5.0


def _is_ours(args: List[str], program_dirs: List[str]) -> bool:
    if not args:
        return False
    program = args[0]
    return (os.path.basename(program) == "droidheapd" or args[1:3] == ["-m", "droidheap.cli"]
            or any(program.startswith(directory) for directory in program_dirs))


def _state_and_parent(pid: int) -> Tuple[str, int]:
    """Its state letter and its parent's pid; ("X", 0) when it is gone."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return "X", 0


def _ancestors(pid: int) -> List[int]:
    chain = []
    for _ in range(64):
        pid = _state_and_parent(pid)[1]
        if pid == 0:
            break
        chain.append(pid)
    return chain


def _started_here(pid: int, our_ancestors: List[int]) -> bool:
    """Whether this worker started it: a descendant, or an orphan (its parent gone, it is the
    child of init or of a subreaper above this worker)."""
    chain = _ancestors(pid)
    return os.getpid() in chain or (bool(chain) and chain[0] in our_ancestors)


class Leftovers:
    """Which of our processes ran before a test's call; which of ours run after its teardown."""

    def __init__(self, program_dirs: List[str]):
        self._program_dirs = program_dirs
        self._before = set(host_pids())
        self._our_ancestors = _ancestors(os.getpid())

    def _ours_since(self) -> Dict[int, str]:
        found = {}
        for pid in set(host_pids()) - self._before - {os.getppid()}:
            args = program_arguments(pid)
            alive = _state_and_parent(pid)[0] not in ("Z", "X")
            if (_is_ours(args, self._program_dirs) and alive and
                    _started_here(pid, self._our_ancestors)):
                found[pid] = " ".join(args)
        return found

    def check(self) -> str:
        """Waits for the test's processes to go; kills those still running after the grace
        period and says which they were ("" when none)."""
        deadline = time.monotonic() + _GRACE_S
        left = self._ours_since()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self._ours_since()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return "; ".join(f"pid {pid} ({cmdline[:160]})" for pid, cmdline in sorted(left.items()))
