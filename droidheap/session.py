"""One profiling session on one device: push the profiler, run droidheapd, follow its clients,
stop it, pull and convert the trace. Device-agnostic: everything goes through a Device."""
import dataclasses
import pathlib
import re
import time
from typing import Dict, Iterable, List, Optional, Set, Tuple

from droidheap.device.base import (SIGKILL, SIGTERM, SIGUSR1, TRACE_PREFIX, TRACE_SUFFIX,
                                   DaemonProcess, Device)
from droidheap.errors import DroidheapError
from droidheap.output_files import write_output
from droidheap.results.model import ProgramExit
from droidheap.stop_signals import sleep

_STARTUP_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 120.0
_ABANDON_TIMEOUT_S = 10.0
DEFAULT_MAX_DAEMON_MEMORY = 512 * 1024 * 1024
DEFAULT_MAX_TRACE_SIZE = 2 * 1024 * 1024 * 1024
DAEMON_LOG = "droidheapd.log"


# The stack copied per sample is capped at this, and at what half the shared buffer holds beside a
# record's own fields (ring_buffer.h: a record fits in half the buffer; an AllocRecord and its
# header take 328 bytes).
MAX_STACK_BYTES = 64 * 1024
_RECORD_ROOM = 1024


@dataclasses.dataclass
class ProfileOptions:
    """What heap_profile's flags set, as droidheapd takes them."""
    sampling_interval: int = 4096
    dump_interval_ms: int = 0
    dump_at_max: bool = False
    block_client: bool = True
    exact_totals: bool = True
    fork_teardown: bool = True
    heaps: Tuple[str, ...] = ()  # heap_profile's --heaps; none = libc.malloc alone
    all_heaps: bool = False
    block_client_timeout_us: int = 5_000_000
    shmem_size: int = 8 * 1024 * 1024
    seed: int = 0
    unreachable: bool = False  # every dump also sweeps for unreachable blocks (droidheapd's own)
    # Guardrails (0: none): what droidheapd's bookkeeping of the session may take (past it, the
    # process that grew it ends its profile), and the trace's size (past it, the session stops).
    max_daemon_memory: int = DEFAULT_MAX_DAEMON_MEMORY
    max_trace_size: int = DEFAULT_MAX_TRACE_SIZE

    @property
    def max_stack_bytes(self) -> int:
        return max(0, min(MAX_STACK_BYTES, self.shmem_size // 2 - _RECORD_ROOM))

    def daemon_args(self) -> List[str]:
        """droidheapd's flags for these options (targets and paths apart)."""
        args = ["--interval", str(self.sampling_interval), "--shmem-size", str(self.shmem_size),
                "--max-stack", str(self.max_stack_bytes), "--max-memory",
                str(self.max_daemon_memory), "--max-trace-size", str(self.max_trace_size)]
        if self.dump_interval_ms:
            args += ["--dump-interval-ms", str(self.dump_interval_ms)]
        if self.dump_at_max:
            args.append("--dump-at-max")
        if self.block_client:
            args += ["--block-timeout-us", str(self.block_client_timeout_us)]
        else:
            args.append("--no-block-client")
        if not self.exact_totals:
            args.append("--no-exact-totals")
        if not self.fork_teardown:
            args.append("--disable-fork-teardown")
        if self.heaps:
            args += ["--heaps", ",".join(self.heaps)]
        if self.all_heaps:
            args.append("--all-heaps")
        if self.seed:
            args += ["--seed", str(self.seed)]
        if self.unreachable:
            args.append("--unreachable")
        return args


def target_args(pids: Iterable[int] = (), names: Iterable[str] = (),
                every_process: bool = False, spawned: Iterable[int] = ()) -> List[str]:
    """droidheapd's flags for the processes to signal (`pids`) and to accept (those, the programs
    started for the session (`spawned`, never signalled) and `names`, or every process)."""
    pids, names, spawned = list(pids), list(names), list(spawned)
    args = ["--all"] if every_process else []
    if pids:
        args += ["--pid", ",".join(map(str, pids))]
    if spawned:
        args += ["--spawned", ",".join(map(str, spawned))]
    if names:
        args += ["--name", ",".join(names)]
    return args


class Session:
    """Owned by the CLI command that runs it; not thread-safe."""

    def __init__(self, device: Device, options: ProfileOptions):
        self.device = device
        self.options = options
        self.daemon: Optional[DaemonProcess] = None
        self.failure: Optional[str] = None  # why the daemon ended badly, once it has
        self.stopped = False
        self.program_exits: Dict[int, ProgramExit] = {}  # of the programs started for it
        self.trace_path = f"{device.layout.trace_dir}/{TRACE_PREFIX}{time.time_ns()}{TRACE_SUFFIX}"

    def start(self, pids: Iterable[int] = (), names: Iterable[str] = (),
              every_process: bool = False, exit_when_clients_gone: bool = False,
              spawned: Iterable[int] = ()) -> None:
        self.device.install_profiler()
        args = ["--socket", self.device.layout.socket_path, "--output", self.trace_path,
                *self.options.daemon_args(), *target_args(pids, names, every_process, spawned)]
        if exit_when_clients_gone:
            args.append("--exit-when-clients-gone")
        self.daemon = self.device.start_daemon(args)
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while "droidheapd: listening" not in self.daemon.log():
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                self.daemon.signal(SIGKILL)
                raise DroidheapError(f"droidheapd did not start: {self._last_log_line()}")
            sleep(0.02)

    def _last_log_line(self) -> str:
        lines = [line for line in self.daemon.log().splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def _logged_pids(self, event: str) -> Set[int]:
        return {int(pid) for pid in re.findall(rf"droidheapd: {event} pid=(\d+)", self.daemon.log())}

    def connected_pids(self) -> Set[int]:
        return self._logged_pids("connected")

    def recording_pids(self) -> Set[int]:
        """Processes whose client records: every allocation after this is in their profile (the
        handshake comes a moment before, the client's hooks and heaps are set up after it)."""
        return self._logged_pids("recording")

    def exited_pids(self) -> Set[int]:
        """Processes whose profile is over: exited, ended by a guardrail, or whose connection
        was lost."""
        return (self._logged_pids("process exited") | self._logged_pids("profile ended")
                | self._logged_pids("connection lost"))

    def unconnected_descendants(self) -> Tuple[List[Tuple[int, str]], int]:
        """What the spawned programs' descendants ran that never connected, as (pid, command
        line), and how many more droidheapd did not list."""
        log = self.daemon.log() if self.daemon else ""
        listed = [(int(pid), cmdline) for pid, cmdline in
                  re.findall(r"droidheapd: descendant never connected pid=(\d+) cmdline=(.*)", log)]
        more = re.search(r"droidheapd: descendants never connected: (\d+) more", log)
        return listed, int(more.group(1)) if more else 0

    def warnings(self) -> List[str]:
        """What droidheapd warned of (a guardrail reached), for the user."""
        return re.findall(r"droidheapd: warning: (.*)", self.daemon.log()) if self.daemon else []

    def unreachable_sweeps(self) -> List[Tuple[int, str]]:
        """(pid, what it found) of each sweep for unreachable memory (--unreachable), in order."""
        if not self.daemon:
            return []
        return [(int(pid), found) for pid, found in
                re.findall(r"droidheapd: unreachable pid=(\d+): (.*)", self.daemon.log())]

    def wait_until(self, condition, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                return condition()
            sleep(0.02)
        return True

    def running(self) -> bool:
        return self.daemon is not None and self.daemon.poll() is None

    def dump(self) -> None:
        self.daemon.signal(SIGUSR1)

    def stop(self) -> None:
        """Asks the daemon for its final dump and waits until it has written it. A daemon that
        failed is noted in `failure`, not raised: the dumps it wrote before are still pulled."""
        if self.daemon is None or self.stopped:
            return
        self.stopped = True
        self.daemon.signal(SIGTERM)
        code = self.daemon.wait(_STOP_TIMEOUT_S)
        if code is None:
            self.daemon.signal(SIGKILL)
            raise DroidheapError("droidheapd did not stop in time; the dumps it wrote are kept")
        if code < 0:
            self.failure = f"droidheapd was killed by signal {-code}"
        elif code != 0:
            self.failure = f"droidheapd failed: {self._last_log_line()}"

    def close(self, out_dir: pathlib.Path) -> None:
        """Ends the session on the device, however it went: a daemon still running (the session
        failed before stop()) is asked for its final dump, then killed; its log is saved as
        `out_dir`/droidheapd.log. A trace not pulled stays on the device for `droidheap pull`."""
        if self.daemon is None:
            return
        if self.daemon.poll() is None:
            self.daemon.signal(SIGTERM)
            if self.daemon.wait(_ABANDON_TIMEOUT_S) is None:
                self.daemon.signal(SIGKILL)
                self.daemon.wait(_ABANDON_TIMEOUT_S)
        try:
            write_output(out_dir / DAEMON_LOG, self.daemon.log())
        except OSError as e:
            raise DroidheapError(f"cannot write {out_dir / DAEMON_LOG}: {e.strerror}") from None
        finally:
            self.daemon.close()

    def pull_trace(self, out_dir: pathlib.Path) -> pathlib.Path:
        return pull_trace(self.device, self.trace_path, out_dir)


def pull_trace(device: Device, remote: str, out_dir: pathlib.Path) -> pathlib.Path:
    """Moves a trace from the device to `out_dir`/raw-trace."""
    raw = out_dir / "raw-trace"
    device.pull(remote, raw)
    device.remove(remote)
    return raw
