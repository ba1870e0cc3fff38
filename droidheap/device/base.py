"""The Device interface: what a profiling session needs from a phone (over adb) or from the Linux
emulator device. Paths are device paths; everything is synchronous and raises DroidheapError."""
import abc
import dataclasses
import pathlib
from typing import Dict, List, Optional, Sequence


@dataclasses.dataclass
class DeviceLayout:
    """Where the profiler's files live on the device."""
    bin_dir: str        # droidheapd
    lib_dir: str        # heapprofd_client.so, where the device's libc loads it from
    socket_path: str    # droidheapd listens here; clients connect
    trace_dir: str      # traces written by the daemon
    tmp_dir: str


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


class Device(abc.ABC):
    abi: str
    layout: DeviceLayout

    @abc.abstractmethod
    def describe(self) -> str:
        """A short name for messages ("emulated device at ~/.cache/...")."""

    @abc.abstractmethod
    def lock(self) -> None:
        """Claims the device for one profiling session; DroidheapError when it cannot be."""

    @abc.abstractmethod
    def unlock(self) -> None:
        ...

    @abc.abstractmethod
    def install_profiler(self, binaries: pathlib.Path) -> None:
        """Pushes droidheapd and the client library from a host directory."""

    @abc.abstractmethod
    def set_properties(self, properties: Dict[str, str]) -> None:
        """Sets (value "") or clears (value "") system properties."""

    @abc.abstractmethod
    def pidof(self, name: str) -> List[int]:
        """Pids of running processes whose program name is `name`."""

    @abc.abstractmethod
    def process_exists(self, pid: int) -> bool:
        ...

    @abc.abstractmethod
    def check_attachable(self, pid: int) -> None:
        """Raises DroidheapError saying why the profiling signal cannot reach `pid`."""

    @abc.abstractmethod
    def check_program(self, argv: Sequence[str]) -> None:
        """Raises DroidheapError when argv[0] cannot be started on the device."""

    @abc.abstractmethod
    def start_daemon(self, args: Sequence[str]) -> DaemonProcess:
        """Starts droidheapd detached from this process (not the parent of any target)."""

    @abc.abstractmethod
    def spawn(self, argv: Sequence[str]):
        """Starts a program as the device's shell would; returns a subprocess.Popen-like handle."""

    @abc.abstractmethod
    def shell(self, argv: Sequence[str]) -> int:
        """Runs a program in the foreground, terminal attached; returns its exit code."""

    @abc.abstractmethod
    def pull(self, remote: str, local: pathlib.Path) -> None:
        ...

    @abc.abstractmethod
    def remove(self, remote: str) -> None:
        ...
