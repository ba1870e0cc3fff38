"""The Device interface: what a profiling session needs from a phone (over adb) or from the Linux
emulator device. Paths are device paths; everything is synchronous and raises DroidheapError."""
import abc
import dataclasses
import pathlib
from typing import Dict, List, Optional, Sequence

from droidheap.errors import DroidheapError


@dataclasses.dataclass
class DeviceLayout:
    """Where the profiler's files live on the device."""
    bin_dir: str        # droidheapd
    lib_dir: str        # heapprofd_client.so, where the device's libc loads it from
    socket_path: str    # droidheapd listens here; clients connect
    trace_dir: str      # traces written by the daemon
    tmp_dir: str


# The traces sessions write in DeviceLayout.trace_dir.
TRACE_PREFIX, TRACE_SUFFIX = "droidheap-", ".trace"
TRACE_GLOB = f"{TRACE_PREFIX}*{TRACE_SUFFIX}"

# Signals as the device numbers them (Linux's, for Android and the emulator alike), not as the
# host's signal module does: macOS's SIGUSR1 is 30, and Windows has no SIGUSR1 or SIGKILL.
SIGKILL, SIGUSR1, SIGTERM = 9, 10, 15


class DaemonProcess(abc.ABC):
    """A running droidheapd. Its log is read through `log()`."""

    @abc.abstractmethod
    def poll(self) -> Optional[int]:
        """The exit code, or None while it runs."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> Optional[int]:
        """Waits for it to exit; None when it is still running after the timeout."""

    @abc.abstractmethod
    def signal(self, signum: int) -> None:
        """Sends a signal (SIGUSR1 dumps, SIGTERM stops)."""

    @abc.abstractmethod
    def log(self) -> str:
        """What the daemon has written to its log so far."""

    def close(self) -> None:
        """Once it has exited: lets go of what this process held for it; log() still answers."""


class Device(abc.ABC):
    abi: str
    layout: DeviceLayout
    # True when the device's own profiler (Android's heapprofd, through perfetto) does the work
    # instead of droidheapd: the profile command then drives it (platform_heapprofd.py).
    platform_profiler = False
    # True when the paths in the device's traces name this machine's own files (the local
    # device), which symbolize them where they are (made_here.py).
    files_are_this_machines = False

    @abc.abstractmethod
    def describe(self) -> str:
        """A short name for messages ("emulated device at ~/.cache/...")."""

    @abc.abstractmethod
    def lock(self, own_program: bool = False) -> List[str]:
        """Claims the device for one profiling session; DroidheapError when it cannot be. Returns
        notes for the user (what an earlier session had left, and what became of it).
        `own_program`: the session profiles only a program it starts (a device that can give
        such a session a place of its own beside another session may)."""

    @abc.abstractmethod
    def unlock(self) -> None:
        """Ends the claim, undoing every change the session made to the device."""

    @abc.abstractmethod
    def leftover_traces(self) -> List[str]:
        """The traces in layout.trace_dir that earlier sessions left (their droidheap killed, the
        link to the device lost), for `droidheap pull`; asked with the device locked, when no
        droidheapd writes any."""

    @abc.abstractmethod
    def check_profiler_binaries(self) -> List[str]:
        """Raises DroidheapError, naming the build command, when the device's ABI has no build.
        Returns warnings for the user (processes of another ABI that will not be profiled)."""

    @abc.abstractmethod
    def install_profiler(self) -> None:
        """Pushes droidheapd and the client library (and what loads it) for the device's ABI."""

    @abc.abstractmethod
    def enable_at_start(self, name: str) -> None:
        """Programs named `name` started from now on load the client at start (bionic's
        heapprofd.enable.<name>, where the device allows it)."""

    @abc.abstractmethod
    def disable_at_start(self, name: str) -> None:
        ...

    def enable_spawned_at_start(self, name: str) -> None:
        """The program droidheap starts, named `name`, loads the client at its start, and, where
        the device can at no cost to others, so do the programs its descendants exec (droidheapd
        accepts the spawned program's descendants alone). Here: programs named `name` only."""
        self.enable_at_start(name)

    def disable_spawned_at_start(self, name: str) -> None:
        self.disable_at_start(name)

    def spawn_names_start_property(self) -> bool:
        """Whether enable_spawned_at_start names the program in bionic's start property, which
        its name must then be (names.check_start_name)."""
        return True

    def unprofiled_descendants(self, name: str) -> Optional[str]:
        """What to tell a user whose spawned program `name` runs others that the session cannot
        take at their start, and how to take them; None when it takes them all."""
        return None

    def why_descendants_did_not_connect(self, name: str) -> str:
        """Why programs that the spawned program `name` ran never connected to droidheapd, and
        how to take them, for the session's end."""
        return "statically linked, a malloc of their own, or no allocation"

    def profileable_pids(self) -> List[int]:
        """Every running process the profiling signal may reach (--all)."""
        raise DroidheapError(f"--all is not available on {self.describe()}")

    def enable_all_at_start(self) -> None:
        """Every program started from now on loads the client at start (heapprofd.enable=all)."""
        raise DroidheapError(f"--all is not available on {self.describe()}")

    def disable_all_at_start(self) -> None:
        ...

    def can_profile_at_start(self) -> bool:
        """Whether enable_at_start reaches every program started on the device, not only those
        droidheap starts."""
        return True

    @abc.abstractmethod
    def pidof(self, name: str) -> List[int]:
        """Pids of running processes whose program name is `name`."""

    @abc.abstractmethod
    def program_names(self) -> Dict[int, str]:
        """{pid: program name (names.program_name)} of the running processes that -n could
        name, for a pattern to be matched against (names.is_pattern)."""

    @abc.abstractmethod
    def process_exists(self, pid: int) -> bool:
        ...

    def app_name(self, pid: int) -> Optional[str]:
        """The name of `pid` when it is an app (a child of Android's zygote, which gave it its
        name), else None."""
        return None

    def prefer_platform_profiler(self, pids: Sequence[int]) -> bool:
        """Whether the device's own profiler should take these attach targets, droidheap's client
        being unable to reach them; when so, it is used from now on."""
        return False

    @abc.abstractmethod
    def check_attachable(self, pid: int) -> None:
        """Raises DroidheapError saying why the profiling signal cannot reach `pid`."""

    @abc.abstractmethod
    def check_program(self, argv: Sequence[str]) -> None:
        """Raises DroidheapError when argv[0] cannot be started on the device."""

    @abc.abstractmethod
    def program_path(self, program: str) -> Optional[str]:
        """The file the device runs for `program` (a path, or a name its PATH finds); None when
        there is none."""

    @abc.abstractmethod
    def start_daemon(self, args: Sequence[str]) -> DaemonProcess:
        """Starts droidheapd detached from this process (not the parent of any target)."""

    @abc.abstractmethod
    def spawn(self, argv: Sequence[str]):
        """Starts a program as the device's shell would; returns a subprocess.Popen-like handle."""

    @abc.abstractmethod
    def spawn_held(self, argv: Sequence[str], start_name: str):
        """A program started to be profiled from its start as `start_name`, held until its
        release() (a spawn()'s handle with that method), so that droidheapd can take its pid
        alone."""

    def cpu_ticks(self, pid: int) -> Optional[int]:
        """The CPU time `pid` has taken so far (clock ticks), where bionic's profiling signal is
        how a running process is reached (session_runs tells one that ran and never connected);
        None elsewhere, or once it is gone."""
        return None

    @abc.abstractmethod
    def shell(self, argv: Sequence[str]) -> int:
        """Runs a program in the foreground, terminal attached; returns its exit code."""

    @abc.abstractmethod
    def pull(self, remote: str, local: pathlib.Path) -> None:
        ...

    @abc.abstractmethod
    def file_size(self, remote: str) -> int:
        """The size of the file `remote`; raises DroidheapError when it cannot be seen."""

    @abc.abstractmethod
    def read_range(self, remote: str, offset: int, size: int) -> bytes:
        """`size` bytes of the file `remote` from `offset`, fewer at its end; raises
        DroidheapError when it cannot be read."""

    def fetch_files(self, remotes: Sequence[str], local_dir: pathlib.Path) \
            -> Optional[pathlib.Path]:
        """Copies what it can of `remotes` (ELF files to symbolize with) under `local_dir`, at their
        device paths; returns `local_dir`, or None when the device's files are this machine's."""
        return None

    @abc.abstractmethod
    def remove(self, remote: str) -> None:
        ...
