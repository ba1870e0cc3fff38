"""droidheapd on the emulator device (local.py): started in a process group of its own, held by
this process."""
import os
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

from droidheap.device.base import DaemonProcess
from droidheap.errors import DroidheapError

# The daemon's process group: its own, so that the terminal's ^C does not reach it; but not a
# session of its own. Linux's autogroup scheduling makes each session a scheduling group, and a
# mostly idle group's bursts were starved for seconds beside a busy one: the profiled program,
# waiting for the daemon to read its buffer, overran it (a sanitized daemon beside 3 CPU hogs
# got no CPU for 5 s in 4 runs of 5; in the program's session, 0 of 3).
_OWN_PROCESS_GROUP = ({"process_group": 0} if sys.version_info >= (3, 11)
                      else {"preexec_fn": os.setpgrp})


class LocalDaemon(DaemonProcess):
    """droidheapd on the emulator device, held by this process. Its log is a file without a name
    (nothing is left on the device, whatever ends this process) and its stdin a pipe from this
    process, its lifeline: when this process dies the daemon stops, with a final dump, as it does
    over adb."""

    def __init__(self, process: subprocess.Popen, log_file):
        self._process = process
        self._log_file = log_file
        self._closed_log: Optional[str] = None

    def poll(self) -> Optional[int]:
        return self._process.poll()

    def wait(self, timeout_s: float) -> Optional[int]:
        try:
            return self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, signum: int) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signum)

    def log(self) -> str:
        if self._closed_log is not None:
            return self._closed_log
        fd = self._log_file.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def close(self) -> None:
        if self._closed_log is None:
            self._closed_log = self.log()
            self._log_file.close()
            self._process.stdin.close()


def start_local_daemon(command: Sequence[str], tmp_dir) -> LocalDaemon:
    """Starts droidheapd's `command` (which says --stop-when-stdin-closes), its log in `tmp_dir`."""
    log = tempfile.TemporaryFile(dir=tmp_dir)
    try:
        # Not a child of the target, and untouched by the terminal's ^C (the host stops it with
        # SIGTERM once it has the data).
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=log,
                                   **_OWN_PROCESS_GROUP)
    except OSError as e:
        log.close()
        raise DroidheapError(f"cannot start droidheapd: {e.strerror}") from None
    return LocalDaemon(process, log)
